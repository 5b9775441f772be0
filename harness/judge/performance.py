"""The A/B's performance half, as VIME measures it: each side's figure with its interval over the
steps after the warm-up, and the candidate-minus-baseline difference paired step by step.

The figures are VIME's own (harness.records.log_evidence says where each line comes from): its
perf/* times and throughputs from the `perf N` records, the peak GPU memory of each rollout from its
`Memory-Usage` prints, vLLM's KV-cache usage and generation throughput from the engine's statistics
lines, and RL-Kernel's fallback counter. Nothing here is a pass or a fail: the timings gate
(harness.judge.ab.timings) and the candidate-executed check decide; this is the record a reviewer
reads beside them. A figure either side does not log is listed as not logged, never left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.judge import stats
from harness.judge.verdict import after_warmup
from harness.records.log_evidence import LogEvidence, per_rollout_max, per_rollout_mean

Series = list[tuple[int, float]]


@dataclass(frozen=True)
class Figure:
    """One row of the performance half: where the numbers come from and which way is better."""

    key: str
    label: str
    unit: str
    better: str  # "lower", "higher", or "" (no direction: usage, not cost)
    source: str


FIGURES = (
    Figure("perf/step_time", "step time", "s", "lower", "perf N (trainer): train_wait_time + train_time"),
    Figure("perf/rollout_time", "rollout generation", "s", "lower", "perf N (rollout manager)"),
    Figure("perf/log_probs_time", "log-prob recompute", "s", "lower", "perf N (trainer)"),
    Figure("perf/update_weights_time", "weight sync", "s", "lower", "perf N (trainer)"),
    Figure("perf/actor_train_time", "actor training", "s", "lower", "perf N (trainer)"),
    Figure("perf/train_time", "training (all trainer work)", "s", "lower", "perf N (trainer)"),
    Figure("perf/actor_train_tok_per_s", "training throughput", "tokens/s", "higher", "perf N (trainer)"),
    Figure("perf/tokens_per_gpu_per_sec", "rollout throughput", "tokens/s/GPU", "higher", "perf N (rollout manager)"),
    Figure("vllm/generation_tokens_per_s", "vLLM generation throughput", "tokens/s", "higher", "vLLM's engine statistics lines, mean per rollout"),
    Figure("memory/peak_used_gib", "peak GPU memory used", "GiB", "lower", "VIME's Memory-Usage prints (used_GB), peak per rollout"),
    Figure(
        "memory/peak_reserved_gib", "peak GPU memory reserved by torch", "GiB", "lower", "VIME's Memory-Usage prints (reserved_GB), peak per rollout"
    ),
    Figure("vllm/kv_cache_usage_pct", "vLLM KV-cache usage", "%", "", "vLLM's engine statistics lines, peak per rollout"),
    Figure("rl_kernel/fallbacks", "RL-Kernel fallbacks", "per step", "lower", "train/rl_kernel_*fallback_count_delta (or the per-step flag)"),
)
_FALLBACK_KEYS = ("train/rl_kernel_linear_logp_fallback_count_delta", "train/rl_kernel_logp_fallback_count_delta", "train/rl_kernel_fallback_count")


@dataclass
class Side:
    n: int
    mean: float | None
    ci: tuple[float, float] | None


@dataclass
class PerformanceRow:
    figure: Figure
    baseline: Side
    candidate: Side
    difference: float | None = None
    difference_ci: tuple[float, float] | None = None
    ratio: float | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return {**asdict(self), "figure": asdict(self.figure)}


@dataclass
class PerformanceHalf:
    rows: list[PerformanceRow] = field(default_factory=list)
    confidence: float = 0.95
    warmup: int = 0


def series_of(run, evidence: LogEvidence) -> Callable[[str], Series]:
    """A run's series by figure key: its logged metrics, or what its log's evidence lines give."""
    derived: dict[str, Callable[[], Series]] = {
        "memory/peak_used_gib": lambda: per_rollout_max(evidence.memory, "used_GB"),
        "memory/peak_reserved_gib": lambda: per_rollout_max(evidence.memory, "reserved_GB"),
        "vllm/kv_cache_usage_pct": lambda: per_rollout_max(evidence.kv_cache, "percent"),
        "vllm/generation_tokens_per_s": lambda: per_rollout_mean(evidence.generation_throughput, "tokens_per_s"),
        "rl_kernel/fallbacks": lambda: _fallbacks(run),
    }
    return lambda key: derived[key]() if key in derived else [(n, float(v)) for n, v in run.series(key)]


def _fallbacks(run) -> Series:
    for key in _FALLBACK_KEYS:
        if run.series(key):
            return [(n, float(v)) for n, v in run.series(key)]
    flags = run.series("train/rl_kernel_linear_logp_fallback")  # 1.0 on a step that fell back
    return [(n, float(v)) for n, v in flags]


def _side(values: list[float], confidence: float) -> Side:
    if not values:
        return Side(0, None, None)
    mean = float(np.mean(values))
    if len(values) < 3 or float(np.ptp(values)) == 0.0:
        return Side(len(values), mean, (mean, mean) if len(values) >= 3 else None)
    low, high = stats.block_bootstrap_mean_ci(values, confidence=confidence)
    return Side(len(values), mean, (float(low), float(high)))


def compare(figure: Figure, baseline: Series, candidate: Series, warmup: int, confidence: float) -> PerformanceRow:
    """One figure: each side after the warm-up, and the step-paired difference where both logged it."""
    steps_a, values_a = after_warmup(baseline, warmup)
    steps_b, values_b = after_warmup(candidate, warmup)
    finite_a = {s: v for s, v in zip(steps_a, values_a, strict=True) if math.isfinite(v)}
    finite_b = {s: v for s, v in zip(steps_b, values_b, strict=True) if math.isfinite(v)}
    row = PerformanceRow(figure, _side(list(finite_a.values()), confidence), _side(list(finite_b.values()), confidence))
    if not finite_a or not finite_b:
        row.note = "not logged by " + " or ".join(side for side, values in (("the baseline", finite_a), ("the candidate", finite_b)) if not values)
        return row
    if row.baseline.mean:
        row.ratio = row.candidate.mean / row.baseline.mean
    common = sorted(finite_a.keys() & finite_b.keys())
    row.difference = row.candidate.mean - row.baseline.mean
    if len(common) >= 3:
        a, b = [finite_a[s] for s in common], [finite_b[s] for s in common]
        if float(np.ptp(np.asarray(b) - np.asarray(a))) > 0:
            diff = stats.block_bootstrap_paired_diff_ci(a, b, confidence=confidence)
            row.difference, row.difference_ci = diff.diff, (diff.low, diff.high)
        else:
            row.difference_ci = (row.difference, row.difference)
    else:
        row.note = f"{len(common)} step(s) logged by both: no interval"
    return row


def performance_half(baseline, candidate, baseline_evidence: LogEvidence, candidate_evidence: LogEvidence, knobs) -> PerformanceHalf:
    """Every figure of FIGURES for a baseline and a candidate run (harness.records.runload.Run)."""
    warmup, confidence = int(knobs.threshold("warmup_steps")), knobs.threshold("bootstrap_confidence")
    of_a, of_b = series_of(baseline, baseline_evidence), series_of(candidate, candidate_evidence)
    rows = [compare(figure, of_a(figure.key), of_b(figure.key), warmup, confidence) for figure in FIGURES]
    return PerformanceHalf(rows, confidence, warmup)
