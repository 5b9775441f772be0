"""A candidate that proves it ran: each A/B candidate's operator calls, counted inside the calls by
both engines (harness/embedded/operator_calls.py), judged by harness/judge/candidate_execution.py.

The answer is decided by the Session (harness.experiment.session.Session.candidate_executed) on
the A/B's own runs. The second test is a test of that judge on the same real records: with one
expected count set to zero it must read "not executed".
"""

from __future__ import annotations

import pytest

from fixtures.experiment import decide
from harness.judge.candidate_execution import NOT_EXECUTED, judge_execution
from harness.records.operator_calls import OperatorCalls, read_operator_calls

pytestmark = [pytest.mark.ab, pytest.mark.p3]


def test_candidate_executed_on_both_engines(ab_candidate, main_job, request):
    decide(main_job, request, "candidate_executed", None if ab_candidate == "pair" else ab_candidate)


def _counts(run) -> OperatorCalls:
    calls, problem = read_operator_calls(run.path)
    assert calls is not None, f"candidate not checked: {problem}"
    return calls


def _rollouts_logged(run) -> int:
    return len({n for n, _ in run.series("train/train_rollout_logprob_abs_diff")})


def _zeroed(calls: OperatorCalls, side: str, pass_: str, operator: str) -> OperatorCalls:
    """The same record with one expected count at zero: what a run whose candidate was requested but
    never called there would have counted (its tokens moved to the native path, where it is not native)."""
    raw = calls.model_dump(by_alias=True)
    passes = raw[side]["passes"].setdefault(pass_, {})
    moved = passes.pop(operator, None)
    if moved is not None and operator != "native":
        passes["native"] = moved
    return OperatorCalls(**raw)


def test_a_candidate_requested_but_not_counted_is_not_executed(ab_candidate, main_job):
    """Each of the candidate's expected counts, set to zero in turn on its real run's record."""
    baseline, run = main_job.ab_pair(None if ab_candidate == "pair" else ab_candidate)
    calls = _counts(run)
    for e in calls.expected:
        verdict = judge_execution(_zeroed(calls, e.side, e.pass_, e.operator), baseline=_counts(baseline), rollouts_logged=_rollouts_logged(run))
        assert verdict.status == NOT_EXECUTED, (e, verdict.message)
        assert verdict.message.startswith(f"candidate not executed: {e.side} {e.pass_} counted 0 calls"), verdict.message
