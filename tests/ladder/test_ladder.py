"""The mismatch knob ladder: each rung against its parent (generated from knobs/ladder/).

A rung passes when the delta it adds is isolated (a confidence interval against its parent), its
observed direction and evidence-decided drift class match what the rung file expects, and the
rung meets the absolute bounds its file declares (expect.max_*: the fp32 floor; near-aligned low
and stable). The judge (harness.judge.ladder) decides all of it; this file asks and asserts.
"""

import pytest

from harness.experiment.evidence import family_levels, judge_rung, replicate_sets
from harness.experiment.paired_scores import paired_delta
from harness.judge.ladder import bound_findings, expectation_findings, family_members

# Holm levels per (stage, mode): every rung of a stage's family is one decision of one family.
_FAMILIES: dict[tuple[str, str], dict] = {}


@pytest.mark.ladder
def test_rung_against_parent(
    rung_case, knobs, get_run, framework_checks, framework_not_checked, contract_check, boundary_check, experiment_record, pytestconfig
):
    stage, rung, mode = rung_case.stage, rung_case.rung, rung_case.mode
    backend = pytestconfig.getoption("--backend")

    fetch = get_run.fetcher(stage, mode)  # fetch(rung_id, **overrides); fetch.many launches several at once

    if rung.parent is not None and rung.id not in family_members(knobs, stage, backend):
        # The parent does not run at this stage, or is skipped on this backend (on-vime: skip):
        # nothing to compare with, so the rung gets the smoke check, and its own bounds if it has any
        # (near-aligned on VIME, where the fp32 floor cannot run).
        run = fetch(rung.id)
        smoke_check(stage, rung, run, knobs, experiment_record)
        findings = bound_findings(rung, run, knobs)
        assert not findings, "\n  ".join(findings)
        return
    replicates = knobs.stages[stage].replicate_count(backend)  # seeds per side (knobs/stages.yaml)
    sides = [rung_id for rung_id in (rung.id, rung.parent) if rung_id is not None]
    for rung_id, runs in zip(sides, replicate_sets(sides, fetch, replicates)):
        for run in runs:
            state = run.status.state if run.status else "unknown"
            failure = run.status.failure if run.status else None
            assert state == "finished", f"{rung_id} at {stage} (seed {run.spec.flag('seed')}): run {run.id} is {state}" + (
                f" ({failure.signature} at log.txt line {failure.line}: {failure.text})" if failure else ""
            )
    holm = None
    if rung.parent is not None:
        if (stage, mode) not in _FAMILIES:
            _FAMILIES[stage, mode] = family_levels(knobs, stage, backend, fetch)
        holm = _FAMILIES[stage, mode][rung.id]
    paired = (lambda child, parent: paired_delta(child, parent, knobs)) if backend == "embedded" else None
    judgement = judge_rung(
        rung,
        knobs,
        fetch,
        framework_checks,
        holm,
        contract_check,
        replicates=replicates,
        paired=paired,
        boundary_check=boundary_check,
        framework_not_checked=framework_not_checked,
    )
    experiment_record.rung(rung_case, judgement, fetch)
    assert not judgement.problems, "; ".join(judgement.problems)

    findings = expectation_findings(rung, judgement, fetch(rung.id), knobs)
    assert not findings, judgement.summary() + "\n  " + "\n  ".join(findings)


def smoke_check(stage, rung, run, knobs, experiment_record) -> None:
    """A rung whose parent does not run at this stage (P0: smoke and config validation): the spec
    validated (the fixture did that), the run finished, and the primary metric is there."""
    from harness.judge.acceptance import JudgeContext, abs_diff_present_every_step

    experiment_record.smoke(stage, rung, run)
    state = run.status.state if run.status else "unknown"
    assert state == "finished", f"{rung.id} at {stage}: run {run.id} is {state}: {run.status.failure if run.status else ''}"
    verdict = abs_diff_present_every_step(JudgeContext(run=run, knobs=knobs))
    assert verdict.passed, verdict.message
