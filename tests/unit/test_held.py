"""Every answer is expected or leaves for a named report, and an unjudged answer never passes
(harness.judge.held), on runs built to pass and built to fail."""

from __future__ import annotations

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.evidence import acceptance_context
from harness.judge.acceptance import CHECKS
from harness.judge.held import hold_ab, hold_criterion
from harness.judge.verdict import Verdict
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
CRITERIA = {c.id: c for c in KNOBS.acceptance.criteria}


def _context(run):
    def fetch(rung, **overrides):
        raise LookupError((rung, overrides))

    return acceptance_context(run, KNOBS, fetch)


def test_metrics_stable_with_one_step_on_a_cluster_is_a_failure_not_a_pass(build_run):
    """A cluster run of one step: the A/A check cannot judge it, so it is not judged, and an answer not
    judged is a failure where it is expected (on a cluster it is): it never prints PASSED."""
    run = build_run("cluster", backend="vime", steps=1)
    verdict = CHECKS["stable_under_aa"](_context(run))
    assert not verdict.passed and verdict.message.startswith("not judged")
    held = hold_criterion(CRITERIA["metrics-stable-enough-to-compare"], verdict, "vime")
    assert held.status == "failed"


def test_an_answer_marked_not_judged_never_passes_even_when_a_check_says_passed():
    verdict = Verdict(True, "looks fine", {"outcome": "not judged"})
    assert hold_criterion(CRITERIA["mismatch-non-trivial-and-measurable"], verdict, "embedded").status == "failed"


def test_a_criterion_reported_on_the_embedded_backend_is_carried_never_passed():
    verdict = Verdict(True, "stable")
    held = hold_criterion(CRITERIA["metrics-stable-enough-to-compare"], verdict, "embedded")
    assert held.status == "reported" and "not-sized-on-embedded" in held.skip_reason
    assert hold_criterion(CRITERIA["metrics-stable-enough-to-compare"], verdict, "vime").status == "passed"


def test_the_seven_formerly_exempt_answers_are_each_expected_or_reported():
    """routing-replay, tis, temperature, the candidate-operator rung, stale-weights' direction, the A/B's
    reward questions, mode consistency, the A/B's timings and the A/A acceptance criterion: each is now
    one expected outcome or a named report with its reason (knobs/reports.yaml)."""
    rungs = KNOBS.rungs
    assert rungs["tis"].expect.direction == "flat" and rungs["candidate-operator"].expect.direction == "flat"
    assert set(rungs["routing-replay"].expect.reported) == {"direction", "class"} and rungs["routing-replay"].expect.rules_out == ["framework"]
    assert rungs["temperature"].expect.rules_out == ["framework", "semantic", "candidate-operator"]
    assert rungs["stale-weights"].expect.reported["direction"].report == "controls" and rungs["stale-weights"].expect.drift_class == "framework"
    for candidate in (None, "true-on-policy"):
        assert KNOBS.ab.expected_to_pass("reward-preserved", "embedded", candidate)[0] is True
        assert KNOBS.ab.expected_to_pass("timings", "embedded", candidate)[0].report == "performance"
    assert KNOBS.ab.expected_to_pass("mode-consistency", "embedded")[0] is True
    assert CRITERIA["metrics-stable-enough-to-compare"].reported["embedded"].report == "not-sized-on-embedded"
    for reported in [r for rung in rungs.values() for r in rung.expect.reported.values()]:
        assert reported.report in KNOBS.reports and len(reported.reason.split()) >= 10


def test_an_inconclusive_ab_answer_expected_as_a_decided_no_fails():
    from harness.judge.ab import Answer

    inconclusive = Answer("Does the candidate reduce abs-diff?", False, "inconclusive", {"outcome": "inconclusive"})
    assert hold_ab(inconclusive, KNOBS, "embedded", "drift-reduced").status == "failed"
    flat = Answer("Does the candidate reduce abs-diff?", False, "flat", {"outcome": "flat"})
    assert hold_ab(flat, KNOBS, "embedded", "drift-reduced").status == "passed"
