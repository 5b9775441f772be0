"""The A/B's performance half on the embedded backend: each figure's baseline and candidate means over
the pairs, and the candidate-minus-baseline difference with its interval, paired step by step over
every pair as the gate's questions pair theirs (harness.judge.ab.paired_metric: the A/B's estimator,
whatever it is).

The figures are the trainer's ``perf N`` records: step, rollout, log-prob recompute and training
time, tokens/s and the trainer process's peak memory (the embedded stand-in for peak GPU memory).
Wall-clock on a shared 2-core CPU: recorded with the machine named, never a pass or a fail
(knobs/reports.yaml, the performance report, says why); a figure either side does not log is listed as not
logged, never left out. The row shape follows VIME's performance half (figure key, label, unit,
which way is better) so the two can be read side by side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.judge import ab
from harness.spec import Knobs


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    better: str  # lower | higher


FIGURES = (
    Figure("perf/step_time", "step time", "s", "lower"),
    Figure("perf/rollout_time", "rollout generation", "s", "lower"),
    Figure("perf/log_probs_time", "log-prob recompute", "s", "lower"),
    Figure("perf/train_time", "training", "s", "lower"),
    Figure("perf/tokens_per_cpu_per_sec", "throughput", "tokens/s/core", "higher"),
    Figure("perf/peak_memory_gb", "peak memory (trainer process RSS)", "GiB", "lower"),
)


@dataclass
class PerformanceRow:
    figure: Figure
    baseline: float | None
    candidate: float | None
    difference: float | None = None
    ci: tuple[float, float] | None = None
    ratio: float | None = None
    note: str = ""

    def text(self) -> str:
        if self.note:
            return f"{self.figure.label}: {self.note}"
        ci = f" [{self.ci[0]:+.3g}, {self.ci[1]:+.3g}]" if self.ci else ""
        return (
            f"{self.figure.label} {self.baseline:.3g} -> {self.candidate:.3g} {self.figure.unit} "
            f"({self.ratio:.2f}x; difference {self.difference:+.3g}{ci})"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "figure": asdict(self.figure), "ci": list(self.ci) if self.ci else None}


def performance_half(baseline, candidate, knobs: Knobs) -> list[PerformanceRow]:
    """Every figure for a pair's sides (one run or the replicates of one side each)."""
    rows = []
    for figure in FIGURES:
        diff, a, b, why = ab.paired_metric(baseline, candidate, figure.key, knobs)
        if diff is None:
            rows.append(PerformanceRow(figure, None, None, note=f"not judged: {why}"))
            continue
        rows.append(PerformanceRow(figure, a, b, diff.diff, (diff.low, diff.high), b / a if a else None))
    return rows
