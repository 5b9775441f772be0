"""The mismatch knob ladder: each rung against its parent (generated from knobs/ladder/).

A rung passes when the delta it adds is isolated (a confidence interval against its parent), its
observed direction and evidence-decided drift class match what the rung file expects, and the
root rungs meet their absolute bounds (fp32 floor; near-aligned low and stable).
"""

import pytest

from harness.judge import stats
from harness.judge.ladder import judge_rung
from harness.judge.verdict import ABS_DIFF, after_warmup


@pytest.mark.ladder
def test_rung_against_parent(rung_case, knobs, get_run, framework_checks, experiment_record):
    stage, rung, mode = rung_case.stage, rung_case.rung, rung_case.mode

    def fetch(rung_id, **overrides):
        return get_run(stage, rung_id, mode, **overrides)

    if rung.parent is not None and stage not in knobs.rungs[rung.parent].stages:
        smoke_check(stage, rung, fetch(rung.id), knobs, experiment_record)
        return
    for rung_id in (rung.id, rung.parent):
        if rung_id is not None:
            run = fetch(rung_id)
            state = run.status.state if run.status else "unknown"
            failure = run.status.failure if run.status else None
            assert state == "finished", (f"{rung_id} at {stage}: run {run.id} is {state}"
                                         + (f" ({failure.signature} at log.txt line {failure.line}: {failure.text})" if failure else ""))
    judgement = judge_rung(rung, knobs, fetch, framework_checks)
    experiment_record.rung(rung_case, judgement, fetch)
    assert not judgement.problems, "; ".join(judgement.problems)

    findings = []
    expected = rung.expect
    if rung.parent is not None:
        if expected.direction != "any" and judgement.observed_direction != expected.direction:
            findings.append(f"expected direction {expected.direction!r} against {rung.parent}, observed {judgement.observed_direction!r}")
        if not expected.accepts_class(judgement.drift_class):
            wanted = " or ".join(repr(c) for c in expected.accepted_classes)
            findings.append(f"expected drift class {wanted} (ladder/{rung.id}.yaml), decided {judgement.drift_class!r}")
    if rung.id == "fp32-floor":
        bound = knobs.threshold("fp32_floor_max_abs_diff")
        if not judgement.child_mean <= bound:
            findings.append(f"fp32 floor mean abs-diff {judgement.child_mean:.3g} > thresholds.fp32_floor_max_abs_diff {bound}")
    if rung.id == "near-aligned":
        findings += near_aligned_is_low_and_stable(fetch(rung.id), knobs)
    assert not findings, judgement.summary() + "\n  " + "\n  ".join(findings)


def near_aligned_is_low_and_stable(run, knobs) -> list[str]:
    steps, values = after_warmup(run.series(ABS_DIFF), int(knobs.threshold("warmup_steps")))
    summary = stats.summarize(values, warmup=0, steps=steps)
    low, high = stats.block_bootstrap_mean_ci(values, confidence=knobs.threshold("bootstrap_confidence"))
    half_width = (high - low) / 2 / summary.mean
    trend = abs(summary.slope) * (steps[-1] - steps[0]) / summary.mean
    problems = []
    figures = (f"mean {summary.mean:.4g}, CI [{low:.4g}, {high:.4g}] (+-{half_width:.0%}), trend {trend:.0%} of the mean "
               f"over steps {steps[0]}-{steps[-1]}, per-step CV {summary.cv:.2f}")
    if summary.mean > knobs.threshold("near_aligned_max_abs_diff"):
        problems.append(f"near-aligned is not low: {figures}; thresholds.near_aligned_max_abs_diff {knobs.threshold('near_aligned_max_abs_diff')}")
    if half_width > knobs.threshold("near_aligned_max_rel_ci_halfwidth"):
        problems.append(f"near-aligned mean is not pinned down: {figures}; thresholds.near_aligned_max_rel_ci_halfwidth "
                        f"{knobs.threshold('near_aligned_max_rel_ci_halfwidth'):.0%}")
    if trend > knobs.threshold("near_aligned_max_rel_trend"):
        problems.append(f"near-aligned drifts over the run: {figures}; thresholds.near_aligned_max_rel_trend "
                        f"{knobs.threshold('near_aligned_max_rel_trend'):.0%}")
    return problems


def smoke_check(stage, rung, run, knobs, experiment_record) -> None:
    """A rung whose parent does not run at this stage (P0: smoke and config validation): the spec
    validated (the fixture did that), the run finished, and the primary metric is there."""
    from harness.judge.acceptance import JudgeContext, abs_diff_present_every_step

    experiment_record.smoke(stage, rung, run)
    state = run.status.state if run.status else "unknown"
    assert state == "finished", f"{rung.id} at {stage}: run {run.id} is {state}: {run.status.failure if run.status else ''}"
    verdict = abs_diff_present_every_step(JudgeContext(run=run, knobs=knobs, fetch=None))
    assert verdict.passed, verdict.message
