"""The judge takes runs and typed evidence and returns a verdict; it asks for nothing by callback.

harness.judge.ladder.measure gives the numbers, harness.judge.drift_class.classify the class. Where
a step's evidence depends on the delta's direction (the drifting run's probe 6 or boundary table,
the drifting rung's replay run) and is not in hand, the judgement lists it in `needs` and decides
nothing; given the evidence, the same call decides. Runs are real run directories (conftest.py).
"""

from __future__ import annotations

import numpy as np

from harness import DEFAULT_KNOBS_DIR
from harness.judge.budget import LOCALISED, NOT_LOCALISED
from harness.judge.drift_class import classify
from harness.judge.evidence import BoundaryResult, BudgetNotMeasured, ContractResult, FrameworkResult, Need, RungEvidence
from harness.judge.ladder import measure
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def noisy(mean, scale=0.05, seed=0):
    rng = np.random.default_rng(seed)
    values = mean * (1 + scale * rng.standard_normal(200))
    return lambda n: float(values[n])


def with_flags(run, **flags):
    run.spec.flags.update(flags)
    return run


def _judge(rung_id, child, parent, evidence):
    rung = KNOBS.rungs[rung_id]
    return classify(rung, KNOBS, measure(rung, KNOBS, [child], [parent]), [child], [parent], evidence)


def test_a_vime_top_p_rung_asks_for_probe_6_on_the_drifting_run_then_decides_with_it(build_run):
    parent = with_flags(build_run("parent", rung="near-aligned", backend="vime", abs_diff=noisy(0.013)), **{"rollout-top-p": 1.0})
    child = with_flags(build_run("child", rung="top-p", backend="vime", abs_diff=noisy(0.035, seed=1)), **{"rollout-top-p": 0.95})
    evidence = RungEvidence(framework={run.id: FrameworkResult() for run in (child, parent)})
    asked = _judge("top-p", child, parent, evidence)
    assert asked.observed_direction == "up" and asked.needs == [Need("contract", child.id)], asked.summary()
    evidence.contract[child.id] = ContractResult("fail", "12 sampled tokens lie outside the rollout's own top-p set")
    decided = _judge("top-p", child, parent, evidence)
    assert not decided.needs and decided.drift_class == "semantic" and decided.evidence["contract_probe"]["run"] == child.id


def test_a_precision_rung_asks_for_the_drifting_runs_boundary_table(build_run, made_budget):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04, seed=1)), **{"vllm-quantization": "fp8"})
    evidence = RungEvidence(framework={run.id: FrameworkResult(not_checked=()) for run in (child, parent)})
    # T=1, no filters: no replay to run, so probe 6's measured temperature fit is asked for first
    assert _judge("fp8-rollout", child, parent, evidence).needs == [Need("contract", child.id)]
    evidence.contract[child.id] = ContractResult("pass", "both sides' measured temperature lies within the band: trainer T_hat 1.000000 [...]")
    # what survives is numerical: the drifting rung's drift budget decides, its boundary table witnesses
    assert _judge("fp8-rollout", child, parent, evidence).needs == [Need("boundary", child.id), Need("budget", "fp8-rollout")]
    evidence.boundary[child.id] = BoundaryResult("breaks", "first boundary beyond 4x its envelope: logsumexp", "logsumexp")
    evidence.budget["fp8-rollout"] = made_budget("fp8-rollout", LOCALISED, "log-softmax")
    decided = _judge("fp8-rollout", child, parent, evidence)
    assert decided.drift_class == "candidate-operator" and "log-softmax" in decided.reasons[-1]
    assert decided.evidence["witnesses"]["agree"] is True, "the table breaks at logsumexp, inside the log-softmax lever's rows"
    assert decided.ruled_out["framework"].startswith("framework probes 1-2"), "both runs' probes 1-2 ran and passed"


def test_the_budget_decides_and_a_disagreeing_envelope_table_is_stated_not_hidden(build_run, made_budget):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04, seed=1)), **{"vllm-quantization": "fp8"})
    evidence = RungEvidence(contract={child.id: ContractResult("pass", "measured T_hat within the band")})
    evidence.boundary[child.id] = BoundaryResult("within", "every boundary within its envelope")
    evidence.budget["fp8-rollout"] = made_budget("fp8-rollout", LOCALISED, "fp8-weights")
    decided = _judge("fp8-rollout", child, parent, evidence)
    assert decided.drift_class == "candidate-operator"
    assert decided.evidence["witnesses"]["agree"] is False and any("it disagrees: the budget localises" in r for r in decided.reasons)
    evidence.budget["fp8-rollout"] = made_budget("fp8-rollout", NOT_LOCALISED)
    evidence.boundary[child.id] = BoundaryResult("breaks", "first boundary beyond 4x its envelope: logsumexp", "logsumexp")
    decided = _judge("fp8-rollout", child, parent, evidence)
    assert decided.drift_class == "expected-numerical" and any("envelope table breaks at logsumexp" in r for r in decided.reasons)


def test_without_a_drift_budget_the_class_is_undecided_whatever_the_table_says(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04, seed=1)), **{"vllm-quantization": "fp8"})
    evidence = RungEvidence(drift_budget=False, contract={child.id: ContractResult("pass", "measured T_hat within the band")})
    evidence.boundary[child.id] = BoundaryResult("breaks", "first boundary beyond 4x its envelope: logsumexp", "logsumexp")
    judgement = _judge("fp8-rollout", child, parent, evidence)
    assert not judgement.needs and judgement.drift_class == "undecided" and "needs the drift budget" in judgement.reasons[-1]
    evidence = RungEvidence(drift_budget=True, boundary_table=False, contract=evidence.contract)
    evidence.budget["fp8-rollout"] = BudgetNotMeasured("run child ran on backend 'vime'")
    judgement = _judge("fp8-rollout", child, parent, evidence)
    assert judgement.drift_class == "undecided" and "backend 'vime'" in judgement.reasons[-1]


def test_a_failed_framework_probe_decides_before_any_other_evidence_is_asked_for(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = with_flags(build_run("child", rung="stale-weights", abs_diff=noisy(0.03, seed=1)), **{"embedded-inject": "stale-weights:2"})
    evidence = RungEvidence(framework={child.id: FrameworkResult(("probe 2 (model state): weight version 3 vs 5",)), parent.id: FrameworkResult()})
    judgement = _judge("stale-weights", child, parent, evidence)
    assert not judgement.needs and judgement.drift_class == "framework" and "probe 2" in judgement.reasons[-1]


def test_classify_leaves_the_measured_judgement_as_it_was(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.013, seed=1))
    rung = KNOBS.rungs["temperature"]
    measured = measure(rung, KNOBS, [child], [parent])
    before = (list(measured.reasons), dict(measured.evidence), measured.drift_class)
    classify(rung, KNOBS, measured, [child], [parent], RungEvidence())
    classify(rung, KNOBS, measured, [child], [parent], RungEvidence())
    assert (measured.reasons, measured.evidence, measured.drift_class) == before, "judging again starts from the same numbers"
