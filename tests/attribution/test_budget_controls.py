"""Planted faults localised by intervention: a fault at one boundary is where the drift budget puts
the run's drift (docs/controls.md, "By intervention").

Each (fault, rung) below was localised to its boundary's lever on the calibration seed by
`make controls` (reports/controls/budget/control_sizes.json), far enough past the pre-registered
share that another seed keeps the answer; here it is judged on the stage's own seed, which the
calibration never used: a run of the rung with the fault planted (30 rollouts), its own tokens
re-scored under every lever, and the budget must name the fault's lever.
"""

from __future__ import annotations

import pytest

from harness.experiment import control_variants
from harness.experiment.budget_scores import fault_drift_scores, seed_scores
from harness.judge.budget import LOCALISED, judge_budget
from harness.report.allure_attach import attach_text, label_experiment

pytestmark = pytest.mark.attribution

# (fault, rung) -> the lever of knobs/levers.yaml whose boundary it is planted at, localised there on
# the calibration seed 7001 (add-one share, SE past the share): rollout-lse at bf16 size on the bf16
# rung (73%, +92 SE) and the fp8 rung (44%, +37 SE); the fp8 weights read back at twice their scale (95%,
# +12 SE); at fp8 e4m3's 3 mantissa bits (the smallest size the budget localises each at), the trainer's
# attention softmax (88%, +7.3 SE) and MLP reduction (46%, +7.7 SE) on the bf16 rung and its LM-head GEMM
# on the fp8 rung (71%, +14 SE). At bf16 size those three stay under the share (docs/results.md).
LOCALISED_ON_CALIBRATION = {
    ("rollout-lse-bf16", "near-aligned"): "log-softmax",
    ("rollout-lse-bf16", "fp8-rollout"): "log-softmax",
    ("rollout-fp8-weight-scale:2", "fp8-rollout"): "fp8-weights",
    ("trainer-softmax-bits:3", "near-aligned"): "attention-prefill",
    ("trainer-tp-reduce-bits:3", "near-aligned"): "mlp",
    ("trainer-lm-head-bits:3", "fp8-rollout"): "lm-head",
}


@pytest.mark.parametrize(("fault", "rung"), list(LOCALISED_ON_CALIBRATION))
def test_a_planted_fault_is_localised_by_intervention_at_its_boundary(get_run, knobs, fault, rung):
    run = get_run("p1", rung, "colocate", **{"num-rollout": 30, "embedded-inject": fault})
    label_experiment("p1", rung, f"planted {fault}, localised by intervention", "colocate", "embedded", run.id)
    budget = judge_budget(rung, seed_scores([run], knobs.levers), knobs.levers, knobs)
    attach_text(budget.text(), "drift budget")
    lever = LOCALISED_ON_CALIBRATION[fault, rung]
    assert budget.verdict == LOCALISED and budget.boundary == lever, budget.text()


# (fault, rung) -> the lever whose boundary it is planted at, where the budget of the fault's OWN drift
# (what it does to the mismatch against its clean twin, re-scored on the same tokens:
# budget_scores.fault_drift_scores) localised it on the calibration seed 7001 (make controls:
# reports/controls/own-drift/, 2026-12-07), 10 rollouts unless OWN_DRIFT_ROLLOUTS_BY_RUNG says more:
# the MLP's reduction on the bf16 rung (100%, +7.4 SE) and the fp8 rung (+8.2 SE), the LM-head GEMM on
# both (+7.4, +7.0 SE), one expert of the MoE model at bf16 (+4.2 SE); added the same day, pre-registered
# from their calibration before any run at the stage seed: the attention softmax with its row sum at
# bf16 on both (+12.4, +7.7 SE: every token moved) and the top-p filter's running sum at bf16 on top-p
# with four times the prompts and 80 rollouts (+5.6 SE: it moves only the 1.1% of tokens whose step's
# kept set it changes, so it needs that many); later (e9e6d31), pre-registered likewise from their
# calibration at 7001: the filter on the fp8 rung with top-p alone
# as wide (+9.2 SE, 1,052 tokens moved), and the expert on the fp8 MoE rung with 30 rollouts (+5.3 SE;
# +3.2 at 10). The filter is not judged on fp8-plus-filters: behind top-k 40 its running sum adds at most 40
# probabilities and its bf16 fault moved 8 tokens of ~100,000 at 7001 (+0.9 SE, inconclusive), too few to
# place at any size a test can run. The share of the rung's whole drift misses each at bf16
# size (above: what the fault adds is a few percent of it). Not here: trainer-softmax-bf16, the identity
# on a bf16 trainer (its scores and probabilities are bf16 already: the faulted and clean re-scores are
# bitwise equal on the bf16 rung); the log-sum-exp and the fp8 scale are judged by the share above.
# Judged here on the stage's seed, which the calibration never used.
OWN_DRIFT_LOCALISED_ON_CALIBRATION = {
    ("trainer-tp-reduce-bf16", "near-aligned"): "mlp",
    ("trainer-tp-reduce-bf16", "fp8-rollout"): "mlp",
    ("trainer-lm-head-bf16", "near-aligned"): "lm-head",
    ("trainer-lm-head-bf16", "fp8-rollout"): "lm-head",
    ("trainer-expert-bf16", "moe-bf16"): "mlp",  # the MoE model at bf16 without filters (control_variants)
    ("trainer-softmax-sum-bf16", "near-aligned"): "attention-prefill",
    ("trainer-softmax-sum-bf16", "fp8-rollout"): "attention-prefill",
    ("rollout-filter-bf16", "top-p-wide"): "sampler-filter",  # top-p, 32 prompts a rollout (control_variants)
    ("rollout-filter-bf16", "fp8-top-p-wide"): "sampler-filter",  # fp8-rollout with top-p, as wide (control_variants)
    ("trainer-expert-bf16", "fp8-plus-filters-moe"): "mlp",
}
OWN_DRIFT_ROLLOUTS = 10  # as the calibration (Makefile OWN_DRIFT): 4 kept rollouts' tokens, paired
# as the calibration (Makefile OWN_DRIFT_EDGE: 39 kept rollouts; OWN_DRIFT_MOE: 14)
OWN_DRIFT_ROLLOUTS_BY_RUNG = {"top-p-wide": 80, "fp8-top-p-wide": 80, "fp8-plus-filters-moe": 30}


@pytest.mark.parametrize(("fault", "rung"), list(OWN_DRIFT_LOCALISED_ON_CALIBRATION))
def test_a_bf16_size_fault_is_localised_by_intervention_on_its_own_drift(get_run, knobs, fault, rung):
    ladder_rung, variant = control_variants.resolve(rung)
    rollouts = OWN_DRIFT_ROLLOUTS_BY_RUNG.get(rung, OWN_DRIFT_ROLLOUTS)
    run = get_run("p1", ladder_rung, "colocate", **variant, **{"num-rollout": rollouts, "embedded-inject": fault})
    label_experiment("p1", ladder_rung, f"planted {fault}, its own drift localised by intervention", "colocate", "embedded", run.id)
    # add-one settings only: the localisation reads nothing else, and it nearly halves the re-score
    scores = fault_drift_scores(run, knobs.levers, leave_one_out=False)
    budget = judge_budget(f"{rung}, {fault}'s own drift", scores, knobs.levers, knobs)
    attach_text(budget.text(), "the fault's own drift budget")
    lever = OWN_DRIFT_LOCALISED_ON_CALIBRATION[fault, rung]
    assert budget.verdict == LOCALISED and budget.boundary == lever, budget.text()
