"""The candidate's execution judged on built operator-count records (no run): harness.judge.candidate_execution."""

from __future__ import annotations

import json

from harness.judge.candidate_execution import EXECUTED, NOT_CHECKED, NOT_EXECUTED, judge_execution, judge_pair_execution
from harness.records.operator_calls import FILE, FORMAT, OperatorCalls, read_operator_calls


def _record(**over) -> dict:
    record = {
        "format": FORMAT,
        "rollouts_counted": 4,
        "engine_mode": "colocate",
        "expected": [
            {"side": "trainer", "pass": "recompute", "operator": "op"},
            {"side": "trainer", "pass": "training", "operator": "op"},
            {"side": "rollout", "pass": "sampler", "operator": "op"},
        ],
        "trainer": {"process": 1, "passes": {"recompute": {"op": {"calls": 4, "tokens": 100}}, "training": {"op": {"calls": 4, "tokens": 100}}}},
        "rollout": {"process": 2, "passes": {"sampler": {"op": {"calls": 80, "tokens": 100}}}},
        "problems": [],
    }
    record.update(over)
    return record


def _native_baseline() -> OperatorCalls:
    raw = json.loads(json.dumps(_record()).replace('"op"', '"native"'))
    return OperatorCalls(**raw)


def test_built_records_are_judged_from_counts():
    ok = judge_execution(OperatorCalls(**_record()), baseline=_native_baseline(), rollouts_logged=4)
    assert ok.status == EXECUTED and ok.evidence["rollout_counted_in"].startswith("the engine's own process"), ok
    zero = _record()
    zero["rollout"]["passes"]["sampler"] = {"native": {"calls": 80, "tokens": 100}}
    assert judge_execution(OperatorCalls(**zero)).message.startswith("candidate not executed: rollout sampler counted 0 calls")
    part = _record()
    part["trainer"]["passes"]["training"]["native"] = {"calls": 1, "tokens": 5}
    assert "not executed alone" in judge_execution(OperatorCalls(**part)).message
    same = judge_execution(_native_baseline(), baseline=_native_baseline())
    assert same.status == NOT_EXECUTED and "baseline's own operators" in same.message
    assert judge_execution(OperatorCalls(**_record()), rollouts_logged=5).status == NOT_CHECKED
    unread = judge_execution(OperatorCalls(**_record(rollout=None, problems=["the engine's operator counts could not be read back (x)"])))
    assert unread.status == NOT_CHECKED and "not read back" in unread.message
    missing = judge_execution(None, "operator_calls.json: missing")
    assert missing.status == NOT_CHECKED and not missing.passed


def test_a_bad_record_is_one_line(tmp_path):
    assert read_operator_calls(tmp_path)[1].endswith("missing (the run recorded no operator counts)")
    (tmp_path / FILE).write_text("{")
    assert "not valid JSON" in read_operator_calls(tmp_path)[1]
    (tmp_path / FILE).write_text(json.dumps(_record(format="other")))
    assert "key 'format'" in read_operator_calls(tmp_path)[1]
    bad = _record()
    bad["trainer"]["passes"]["recompute"]["op"]["calls"] = -1
    (tmp_path / FILE).write_text(json.dumps(bad))
    problem = read_operator_calls(tmp_path)[1]
    assert "trainer.passes.recompute.op.calls" in problem and "\n" not in problem


def test_the_pair_answer_needs_the_baseline_counted_and_every_pass_on_the_same_tokens():
    ok = judge_pair_execution(OperatorCalls(**_record()), None, _native_baseline(), None, candidate_rollouts=4, baseline_rollouts=4)
    assert ok.status == EXECUTED, ok.message
    unread = judge_pair_execution(OperatorCalls(**_record()), None, None, "operator_calls.json: missing", candidate_rollouts=4, baseline_rollouts=4)
    assert unread.status == NOT_CHECKED and unread.message.startswith("baseline not checked: operator_calls.json")
    short = judge_pair_execution(OperatorCalls(**_record()), None, _native_baseline(), None, candidate_rollouts=4, baseline_rollouts=5)
    assert short.status == NOT_CHECKED and short.message.startswith("the baseline's own operators")
    uneven = _record()
    uneven["rollout"]["passes"]["sampler"]["op"]["tokens"] = 99
    odd = judge_pair_execution(OperatorCalls(**uneven), None, _native_baseline(), None, candidate_rollouts=4, baseline_rollouts=4)
    assert odd.status == NOT_EXECUTED and "different tokens" in odd.message
