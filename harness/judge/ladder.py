"""One rung against its parent: the isolated delta with a confidence interval, and the drift class
decided from evidence (never from the rung's name).

Decision procedure, in the seed's order (rule out framework, then semantics, before numerics):
  1. The rung's run (or its parent's) fails a framework probe (sample/token identity, weight
     version) -> framework, whatever the mean does: a sync fault confined to a few rollouts makes
     a non-stationary series whose mean barely clears the noise, and it is still a framework fault.
  2. No measurable delta (CI includes zero, |delta| < rung_min_abs_delta, or within
     rung_flat_max_rel_delta of the parent) -> none.
  3. Replaying the rollout's processed-logprob contract in the trainer removes at least
     semantic_replay_min_removed_fraction of the delta -> semantic.
  4. What survives aligned semantics: expected numerical when the rung changes only precision or
     workload flags (knobs/classification.yaml), otherwise candidate operator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.judge import stats
from harness.judge.verdict import after_warmup
from harness.records.metric_names import ABS_DIFF
from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.schema import Rung


@dataclass
class RungJudgement:
    rung: str
    parent: str | None
    child_mean: float
    parent_mean: float | None = None
    diff: stats.DiffCI | None = None
    observed_direction: str = "flat"
    drift_class: str = "none"
    reasons: list[str] = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        head = f"{self.rung}: abs-diff mean {self.child_mean:.4g}"
        if self.diff is not None:
            head += f" vs {self.parent} {self.parent_mean:.4g}: delta {self.diff.diff:+.4g} [{self.diff.low:+.4g}, {self.diff.high:+.4g}]"
        return f"{head}; observed {self.observed_direction}, class {self.drift_class} ({'; '.join(self.reasons)})"


def _series(run: Run, warmup: int) -> list[float]:
    return after_warmup(run.series(ABS_DIFF), warmup)[1]


def replay_is_identity(flags: dict) -> bool:
    return (
        float(flags.get("rollout-temperature", 1.0)) == 1.0
        and float(flags.get("rollout-top-p", 1.0)) >= 1.0
        and int(flags.get("rollout-top-k", -1)) <= 0
    )


def changed_flags(child: Run, parent: Run) -> set[str]:
    a, b = child.spec.flags, parent.spec.flags
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def judge_rung(rung: Rung, knobs: Knobs, fetch: Callable[..., Run], framework_checks: Callable[[Run], list[str]] | None = None) -> RungJudgement:
    """`fetch(rung_id, **overrides)` returns a run at the same stage and mode; `framework_checks(run)`
    returns the failed framework probes' messages (empty when sample identity and weights agree)."""
    warmup = int(knobs.threshold("warmup_steps"))
    child = fetch(rung.id)
    child_values = _series(child, warmup)
    if len(child_values) < 3:
        return RungJudgement(
            rung.id, rung.parent, float("nan"), problems=[f"{rung.id}: only {len(child_values)} finite abs-diff values after warm-up"]
        )
    judgement = RungJudgement(rung.id, rung.parent, float(np.mean(child_values)))
    judgement.evidence["child_run"] = child.id
    if rung.parent is None:
        judgement.reasons.append("root rung: judged against its absolute threshold, not a parent")
        return judgement
    parent = fetch(rung.parent)
    parent_values = _series(parent, warmup)
    judgement.parent_mean = float(np.mean(parent_values))
    judgement.evidence["parent_run"] = parent.id
    judgement.diff = diff = stats.block_bootstrap_diff_ci(parent_values, child_values, confidence=knobs.threshold("bootstrap_confidence"))
    if diff.excludes_zero:
        judgement.observed_direction = "up" if diff.diff > 0 else "down"
    if framework_checks is not None:
        for side in (child, parent):
            failed = framework_checks(side)
            judgement.evidence.setdefault("framework_checks", {})[side.id] = failed or "pass"
            if failed:
                judgement.drift_class = "framework"
                judgement.reasons.append(f"framework probe failed on {side.id}: {failed[0]}")
                return judgement
    min_delta = knobs.threshold("rung_min_abs_delta")
    flat_rel = knobs.threshold("rung_flat_max_rel_delta")
    relative = abs(diff.diff) / judgement.parent_mean if judgement.parent_mean else float("inf")
    if not diff.excludes_zero or abs(diff.diff) < min_delta or relative <= flat_rel:
        judgement.reasons.append(
            f"delta {diff.diff:+.3g} ({relative:.0%} of the parent) is not an effect: CI "
            f"[{diff.low:+.3g}, {diff.high:+.3g}], thresholds.rung_min_abs_delta {min_delta}, "
            f"thresholds.rung_flat_max_rel_delta {flat_rel:.0%}"
        )
        judgement.observed_direction = "flat"
        return judgement
    drifting, steadier = (child, parent) if diff.diff > 0 else (parent, child)
    drifting_rung = rung.id if diff.diff > 0 else rung.parent

    replay_flag = knobs.classification.semantic_replay.flag
    drifting_flags = drifting.spec.flags
    if drifting_flags.get(replay_flag):
        removed = None
        judgement.reasons.append(f"the drifting side already replays the processed contract ({replay_flag})")
    elif replay_is_identity(drifting_flags):
        removed = 0.0
        judgement.reasons.append("processed-logprob replay is the identity here (T=1, top_p=1, top-k off): semantics aligned by construction")
    elif drifting.spec.backend == "embedded":
        replayed = fetch(drifting_rung, **{replay_flag: True})
        replayed_values = _series(replayed, warmup)
        remaining = float(np.mean(replayed_values)) - float(np.mean(_series(steadier, warmup)))
        removed = 1.0 - remaining / abs(diff.diff)
        judgement.evidence.update({"replay_run": replayed.id, "replay_mean": float(np.mean(replayed_values)), "removed_fraction": removed})
        judgement.reasons.append(f"replaying the processed contract on {drifting_rung} removes {removed:.0%} of the delta")
    else:
        removed = None
        judgement.reasons.append("no processed-logprob replay on this backend: semantics judged by the attribution probes")
    if removed is not None and removed >= knobs.threshold("semantic_replay_min_removed_fraction"):
        judgement.drift_class = "semantic"
        return judgement
    changed = changed_flags(child, parent)
    explained = set(knobs.classification.precision_flags.flags) | set(knobs.classification.workload_flags.flags)
    judgement.evidence["changed_flags"] = sorted(changed)
    if changed and changed <= explained:
        judgement.drift_class = "expected-numerical"
        judgement.reasons.append(f"the delta survives aligned semantics and the rung changes only precision or workload flags {sorted(changed)}")
    else:
        judgement.drift_class = "candidate-operator"
        judgement.reasons.append(
            f"the delta survives aligned semantics and framework checks; changed flags {sorted(changed - explained)} "
            "are neither precision nor workload knobs"
        )
    return judgement


def bound_findings(rung: Rung, run: Run, knobs: Knobs) -> list[str]:
    """The rung's absolute bounds (ladder/<rung>.yaml expect.max_*), each judged on its own run's
    abs-diff after warm-up; one line per bound it breaks, with the figures and the threshold's name."""
    bounds = rung.expect.bound_names()
    if not bounds:
        return []
    steps, values = after_warmup(run.series(ABS_DIFF), int(knobs.threshold("warmup_steps")))
    if len(values) < 3:
        return [f"{rung.id}: only {len(values)} finite abs-diff values after warm-up; bounds {sorted(bounds)} not judged"]
    summary = stats.summarize(values, warmup=0, steps=steps)
    low, high = stats.block_bootstrap_mean_ci(values, confidence=knobs.threshold("bootstrap_confidence"))
    observed = {
        "max_abs_diff": summary.mean,
        "max_rel_ci_halfwidth": (high - low) / 2 / summary.mean if summary.mean else float("inf"),
        "max_rel_trend": abs(summary.slope) * (steps[-1] - steps[0]) / summary.mean if summary.mean else float("inf"),
    }
    what = {"max_abs_diff": "mean abs-diff", "max_rel_ci_halfwidth": "CI half-width / mean", "max_rel_trend": "trend over the run / mean"}
    figures = (
        f"mean {summary.mean:.4g}, CI [{low:.4g}, {high:.4g}], trend {observed['max_rel_trend']:.0%} of the mean "
        f"over steps {steps[0]}-{steps[-1]}, per-step CV {summary.cv:.2f}"
    )
    findings = []
    for bound, name in bounds.items():
        limit = knobs.threshold(name)
        if not observed[bound] <= limit:
            findings.append(
                f"{rung.id}: {what[bound]} {observed[bound]:.4g} > thresholds.{name} {limit:g} (ladder/{rung.id}.yaml expect.{bound}); {figures}"
            )
    return findings


def expectation_findings(rung: Rung, judgement: RungJudgement, run: Run, knobs: Knobs) -> list[str]:
    """What the rung file expects that the judgement or the run contradicts: the direction and drift
    class against the parent (when it has one), then the rung's absolute bounds. Empty: as expected."""
    findings = []
    expected = rung.expect
    if rung.parent is not None:
        if expected.direction != "any" and judgement.observed_direction != expected.direction:
            findings.append(f"expected direction {expected.direction!r} against {rung.parent}, observed {judgement.observed_direction!r}")
        if not expected.accepts_class(judgement.drift_class):
            wanted = " or ".join(repr(c) for c in expected.accepted_classes)
            findings.append(f"expected drift class {wanted} (ladder/{rung.id}.yaml), decided {judgement.drift_class!r}")
    return findings + bound_findings(rung, run, knobs)
