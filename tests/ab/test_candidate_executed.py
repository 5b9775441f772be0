"""A candidate that proves it ran: each A/B candidate's operator calls, counted inside the calls by
both engines (harness/embedded/operator_calls.py), judged by harness/judge/candidate_execution.py.

The A/B's own runs come through the fixtures tests/ab/test_ab_gate.py uses (`get_run` at the
pair's stage and mode; each further candidate is the baseline rung with its knobs/ab.yaml `set`).
The verdict's failing side is shown on the same real run's record with one count set to zero.
"""

from __future__ import annotations

import json

import pytest

from fixtures.knobs import knobs_for
from harness.judge.candidate_execution import EXECUTED, NOT_CHECKED, NOT_EXECUTED, judge_execution
from harness.records.operator_calls import FILE, FORMAT, OperatorCalls, read_operator_calls

pytestmark = [pytest.mark.ab, pytest.mark.p3]


def pytest_generate_tests(metafunc):
    """`candidate`: the pair's candidate rung and each knobs/ab.yaml further candidate (skipped, with
    its reason, where its backend list leaves this backend out), as test_ab_gate.py parametrises them."""
    if "candidate" not in metafunc.fixturenames:
        return
    config = metafunc.config
    backend = config.getoption("--backend")
    params = [pytest.param("pair", id="pair")]
    for name, extra in knobs_for(config).ab.candidates.items():
        marks = [] if backend in extra.backends else [pytest.mark.skip(reason=f"knobs/ab.yaml candidates.{name}.backends: {extra.backends}")]
        params.append(pytest.param(name, id=name, marks=marks))
    metafunc.parametrize("candidate", params, scope="module")


@pytest.fixture(scope="module")
def ab_runs(candidate, get_run, pytestconfig, knobs):
    """(baseline run, candidate run) at the judging seed, exactly as the A/B gate fetches them."""
    mode, chosen = pytestconfig.getoption("--mode"), knobs.ab.pair
    baseline = get_run(chosen.stage, chosen.baseline, mode)
    if candidate == "pair":
        return baseline, get_run(chosen.stage, chosen.candidate, mode)
    return baseline, get_run(chosen.stage, chosen.baseline, mode, **knobs.ab.candidates[candidate].set)


def _counts(run) -> OperatorCalls:
    calls, problem = read_operator_calls(run.path)
    assert calls is not None, f"candidate not checked: {problem}"
    return calls


def _rollouts_logged(run) -> int:
    return len({n for n, _ in run.series("train/train_rollout_logprob_abs_diff")})


def test_candidate_executed_on_both_engines(candidate, ab_runs, experiment_record):
    """The candidate's operator counted calls and tokens in the trainer's recompute and training
    forward and in vLLM's sampler; the baseline's own operators counted too. The counts go into the
    experiment record beside the A/B's answers."""
    baseline, run = ab_runs
    calls, problem = read_operator_calls(run.path)
    base, base_problem = read_operator_calls(baseline.path)
    verdict = judge_execution(calls, problem, baseline=base, rollouts_logged=_rollouts_logged(run))
    print(f"{candidate}: {verdict.message} (rollout counted in {verdict.evidence.get('rollout_counted_in')})")
    key = "candidate-executed" if candidate == "pair" else f"{candidate}:candidate-executed"
    experiment_record.ab("candidate executed", (baseline, run), passed=verdict.passed, message=verdict.message, evidence=verdict.evidence, key=key)
    assert verdict.status == EXECUTED, verdict.message
    for row in verdict.evidence["expected"]:
        assert row["calls"] > 0 and row["tokens"] > 0, row
    assert base is not None, f"baseline not checked: {base_problem}"
    own = judge_execution(base, rollouts_logged=_rollouts_logged(baseline))
    assert own.status == EXECUTED, f"the baseline's own operators: {own.message}"
    # Every sampled token's log-prob was computed once by each side in each pass.
    tokens = {(r["side"], r["pass"]): r["tokens"] for r in verdict.evidence["expected"]}
    assert tokens[("trainer", "recompute")] == tokens[("trainer", "training")] == tokens[("rollout", "sampler")], tokens


def _zeroed(calls: OperatorCalls, side: str, pass_: str, operator: str) -> OperatorCalls:
    """The same record with one expected count at zero: what a run whose candidate was requested but
    never called there would have counted (its tokens moved to the native path, where it is not native)."""
    raw = calls.model_dump(by_alias=True)
    passes = raw[side]["passes"].setdefault(pass_, {})
    moved = passes.pop(operator, None)
    if moved is not None and operator != "native":
        passes["native"] = moved
    return OperatorCalls(**raw)


def test_a_candidate_requested_but_not_counted_is_not_executed(candidate, ab_runs):
    """Each of the candidate's expected counts, set to zero in turn on its real run's record."""
    baseline, run = ab_runs
    calls = _counts(run)
    for e in calls.expected:
        verdict = judge_execution(_zeroed(calls, e.side, e.pass_, e.operator), baseline=_counts(baseline), rollouts_logged=_rollouts_logged(run))
        assert verdict.status == NOT_EXECUTED, (e, verdict.message)
        assert verdict.message.startswith(f"candidate not executed: {e.side} {e.pass_} counted 0 calls"), verdict.message


# ---------------------------------------------------------------- the verdict on built records (no run)
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
