"""What a rung file expects, held against its judgement and its run: the one direction against the
parent, the drift class, the classes the evidence must rule out, and the absolute bounds
(ladder/<rung>.yaml expect). The judgement itself is harness.judge.ladder's; nothing here decides
a class or a direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scipy import stats as scipy_stats

from harness.judge import stats, variance
from harness.judge.effects import seed_prior, spec_key
from harness.judge.exact_zero import exactly_zero_findings
from harness.judge.verdict import after_warmup
from harness.records.metric_names import ABS_DIFF
from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.schema import Rung

if TYPE_CHECKING:
    from harness.judge.ladder import RungJudgement


def bound_findings(rung: Rung, run: Run, knobs: Knobs, parent: Run | None = None, side: Sequence[Run] | None = None) -> list[str]:
    """Every absolute expectation of the rung on its own run: exactly zero at every step
    (expect.exactly_zero_every_step, no tolerance; a zero its parent shows too is no evidence), the
    statistical bounds of the run (expect.max_*/min_*) and those of its side: ``side`` is the rung's
    runs at every seed of the stage, the run first (default: the run alone)."""
    return exactly_zero_findings(rung, run, parent) + _mean_bound_findings(rung, run, knobs) + _side_bound_findings(rung, side or [run], knobs)


# Bounds judged on the rung's side (its runs at the stage's seeds), not on one run.
SIDE_BOUNDS = ("max_rel_side_ci_halfwidth",)


def _mean_bound_findings(rung: Rung, run: Run, knobs: Knobs) -> list[str]:
    """The rung's absolute bounds of one run (ladder/<rung>.yaml expect.max_*), each judged on its own
    run's abs-diff after warm-up; one line per bound it breaks, with the figures and the threshold's name."""
    bounds = {bound: name for bound, name in rung.expect.bound_names().items() if bound not in SIDE_BOUNDS}
    if not bounds:
        return []
    steps, values = after_warmup(run.series(ABS_DIFF), int(knobs.threshold("warmup_steps")))
    if len(values) < 3:
        return [f"{rung.id}: only {len(values)} finite abs-diff values after warm-up; bounds {sorted(bounds)} not judged"]
    summary = stats.summarize(values, warmup=0, steps=steps)
    # The judge's one estimator of a run mean's noise (harness.judge.variance: overlapping batch means).
    noise = variance.run_noise(values)
    half = float(scipy_stats.t.ppf(0.5 + knobs.threshold("bootstrap_confidence") / 2, noise.df)) * math.sqrt(noise.variance)
    low, high = noise.mean - half, noise.mean + half
    observed = {
        "max_abs_diff": summary.mean,
        "max_rel_trend": abs(summary.slope) * (steps[-1] - steps[0]) / summary.mean if summary.mean else float("inf"),
        "min_abs_diff": summary.mean,
    }
    what = {
        "max_abs_diff": "mean abs-diff",
        "max_rel_trend": "trend over the run / mean",
        "min_abs_diff": "mean abs-diff",
    }
    figures = (
        f"mean {summary.mean:.4g}, CI [{low:.4g}, {high:.4g}], trend {observed['max_rel_trend']:.0%} of the mean "
        f"over steps {steps[0]}-{steps[-1]}, per-step CV {summary.cv:.2f}"
    )
    return [
        _breach(rung, bound, name, what[bound], observed[bound], knobs, figures)
        for bound, name in bounds.items()
        if _breaks(bound, observed[bound], knobs.threshold(name))
    ]


def _side_bound_findings(rung: Rung, runs: Sequence[Run], knobs: Knobs) -> list[str]:
    """The rung's bounds on its side: the mean over its runs (one a seed) with the judge's one side
    estimator (harness.judge.variance.side_estimate; one run carries the design's A/A seed variance of its
    spec, knobs/effects.yaml)."""
    bounds = {bound: name for bound, name in rung.expect.bound_names().items() if bound in SIDE_BOUNDS}
    if not bounds:
        return []
    warmup = int(knobs.threshold("warmup_steps"))
    series = [after_warmup(run.series(ABS_DIFF), warmup)[1] for run in runs]
    short = [f"{run.id} {len(values)}" for run, values in zip(runs, series, strict=True) if len(values) < 3]
    if short:
        return [f"{rung.id}: too few finite abs-diff values after warm-up ({', '.join(short)}); bounds {sorted(bounds)} not judged"]
    prior = seed_prior(knobs, spec_key(rung.id, runs[0].spec.mode)) if len(runs) == 1 else None
    side = variance.side_estimate(series, prior, rung.id)
    half = float(scipy_stats.t.ppf(0.5 + knobs.threshold("bootstrap_confidence") / 2, side.df)) * side.se
    observed = half / side.mean if side.mean else float("inf")
    seeds = " / ".join(f"{mean:.4g}" for mean in side.run_means)
    figures = (
        f"mean {side.mean:.4g} over {side.seeds} seed(s) ({seeds}), CI [{side.mean - half:.4g}, {side.mean + half:.4g}], "
        f"{side.df:.3g} df, seed part: {side.seed_part}"
        + (
            "; one seed carries a seed variance it cannot measure: the stage's replicates (a site file's) give the side its own"
            if side.seeds == 1
            else ""
        )
    )
    return [
        _breach(rung, bound, name, "side CI half-width / mean", observed, knobs, figures)
        for bound, name in bounds.items()
        if _breaks(bound, observed, knobs.threshold(name))
    ]


def _breaks(bound: str, observed: float, limit: float) -> bool:
    return not (observed >= limit if bound.startswith("min_") else observed <= limit)


def _breach(rung: Rung, bound: str, name: str, what: str, observed: float, knobs: Knobs, figures: str) -> str:
    sign = "<" if bound.startswith("min_") else ">"
    return f"{rung.id}: {what} {observed:.4g} {sign} thresholds.{name} {knobs.threshold(name):g} (ladder/{rung.id}.yaml expect.{bound}); {figures}"


def expectation_findings(
    rung: Rung, judgement: RungJudgement, run: Run, knobs: Knobs, parent: Run | None = None, side: Sequence[Run] | None = None
) -> list[str]:
    """What the rung file expects that the judgement or the run contradicts: the one direction against
    the parent, the one drift class, the classes the evidence must rule out, then the rung's absolute
    bounds. An answer the file sends to a named report (expect.reported) is judged and shown there,
    never checked here. Empty: as expected."""
    findings = []
    expected = rung.expect
    if rung.parent is not None and expected.direction_expected and judgement.observed_direction != expected.direction:
        observed = judgement.observed_direction
        if judgement.outcome is not None and observed == "inconclusive":
            observed += f" (smallest detectable effect {judgement.outcome.detectable:.3g}, effect of interest {judgement.outcome.effect:.3g})"
        findings.append(f"expected direction {expected.direction!r} against {rung.parent} (ladder/{rung.id}.yaml), observed {observed}")
    # The class is checked on a root too: its framework probes decide it (the fp32 floor: none).
    if expected.class_expected and judgement.drift_class != expected.drift_class:
        findings.append(f"expected drift class {expected.drift_class!r} (ladder/{rung.id}.yaml), decided {judgement.drift_class!r}")
    # Classes the rung must rule out by evidence, whatever class (or none) the delta decides.
    for drift_class in expected.rules_out:
        if drift_class not in judgement.ruled_out:
            findings.append(
                f"expected {drift_class} drift ruled out (ladder/{rung.id}.yaml expect.rules_out), "
                f"but no evidence rules it out (decided class {judgement.drift_class!r})"
            )
    return findings + bound_findings(rung, run, knobs, parent, side)
