"""The drift budget's decision (harness.judge.budget): shares, intervals, interaction, localisation.

Fed seeds built to localise (one boundary carries most of the drift), built not to (the drift is
spread, each boundary alone removes little) and built to sit near the pre-registered share
(inconclusive); the contract lever is reported and never an answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.judge.budget import (
    ALL,
    INCONCLUSIVE,
    LOCALISED,
    NATIVE,
    NOT_LOCALISED,
    BudgetInputError,
    SeedScores,
    add_key,
    judge_budget,
    loo_key,
)
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
LEVERS = KNOBS.levers
OPERATORS = list(LEVERS.operator_levers())


def seed(seed: int, removes: dict[str, float], returns: dict[str, float] | None = None, residual: float = 0.0, noise: float = 0.02, n: int = 96):
    """A run whose native per-sequence gaps average 1e-3; lever X alone removes `removes[X]` of each
    sequence's gap, leaving X alone native brings back `returns[X]` of it; all levers leave `residual`."""
    rng = np.random.default_rng(seed)
    native = 1e-3 * (1 + 0.3 * rng.standard_normal(n)).clip(0.2)

    def jitter(share):
        return native * (share + noise * rng.standard_normal(n))

    gaps = {NATIVE: native, ALL: jitter(residual)}
    returns = returns or {}
    for name, lever in LEVERS.levers.items():
        gaps[add_key(name)] = native - jitter(removes.get(name, 0.0))
        if lever.kind == "operator":
            gaps[loo_key(name)] = gaps[ALL] + jitter(returns.get(name, 0.0))
    return SeedScores(run=f"run-{seed}", seed=seed, gaps=gaps, tokens=20 * n, rollouts=(2, 12, 22), replay={})


def test_a_boundary_that_carries_most_of_the_drift_is_localised_to_it():
    budget = judge_budget("fp8-rollout", [seed(s, {"fp8-weights": 0.8}, {"fp8-weights": 0.85}) for s in range(5)], LEVERS, KNOBS)
    assert budget.verdict == LOCALISED and budget.boundary == "fp8-weights", budget.reason
    row = budget.lever("fp8-weights")
    assert row.add.value == pytest.approx(0.8, abs=0.02) and row.add.low < row.add.value < row.add.high
    assert row.margin.se_units >= KNOBS.threshold("min_margin_se")
    assert row.interaction.value == pytest.approx(0.05, abs=0.02)  # leave-one-out minus add-one, stated


def test_a_spread_drift_is_decided_not_localised_and_its_interaction_is_shown():
    # every bf16 boundary alone removes a little, left alone native brings most of it back
    removes = {name: 0.05 for name in OPERATORS}
    returns = {name: 0.7 for name in OPERATORS}
    budget = judge_budget("near-aligned", [seed(s, removes, returns) for s in range(5)], LEVERS, KNOBS)
    assert budget.verdict == NOT_LOCALISED and budget.boundary is None, budget.reason
    row = budget.lever("input-norm")
    assert row.loo.value == pytest.approx(0.7, abs=0.03) and row.interaction.value == pytest.approx(0.65, abs=0.04)
    assert all(r.localisation == NOT_LOCALISED for r in budget.levers if r.kind == "operator")


def test_a_share_near_the_pre_registered_one_is_inconclusive_not_a_pass():
    q = KNOBS.threshold(LEVERS.budget.min_localised_share.threshold)
    budget = judge_budget("near-aligned", [seed(s, {"input-norm": q + 0.005}, noise=0.3) for s in range(2)], LEVERS, KNOBS)
    assert budget.lever("input-norm").localisation == INCONCLUSIVE
    assert budget.verdict == INCONCLUSIVE and "input-norm" in budget.reason


def test_the_contract_lever_is_measured_but_never_an_answer():
    # the replay removes most of a filter rung's drift: reported, but the rung is not localised to it
    budget = judge_budget("fp8-plus-filters", [seed(s, {"processed-logprob-contract": 0.6}) for s in range(5)], LEVERS, KNOBS)
    row = budget.lever("processed-logprob-contract")
    assert row.kind == "contract" and row.add.value == pytest.approx(0.6, abs=0.02)
    assert row.localisation is None and row.loo is None
    assert budget.verdict == NOT_LOCALISED


def test_per_seed_shares_are_kept_beside_the_pooled_one():
    budget = judge_budget("fp8-rollout", [seed(s, {"fp8-weights": 0.8}) for s in (11, 12)], LEVERS, KNOBS)
    by_seed = budget.lever("fp8-weights").by_seed
    assert set(by_seed) == {11, 12} and all(v["add"].value == pytest.approx(0.8, abs=0.03) for v in by_seed.values())


def test_a_setting_not_scored_is_an_error_naming_it():
    broken = seed(0, {})
    del broken.gaps[add_key("mlp")]
    with pytest.raises(BudgetInputError, match="add:mlp"):
        judge_budget("near-aligned", [broken], LEVERS, KNOBS)


def test_without_leave_one_out_settings_the_localisation_is_the_same_and_no_loo_is_claimed():
    # a control's test scores the add-one settings only (budget_scores.settings(leave_one_out=False))
    full = [seed(s, {"mlp": 0.8}, {"mlp": 0.85}) for s in range(3)]
    short = [seed(s, {"mlp": 0.8}, {"mlp": 0.85}) for s in range(3)]
    for scores in short:
        for name in OPERATORS:
            del scores.gaps[loo_key(name)]
    with_loo, without = judge_budget("near-aligned", full, LEVERS, KNOBS), judge_budget("near-aligned", short, LEVERS, KNOBS)
    assert (without.verdict, without.boundary) == (with_loo.verdict, with_loo.boundary) == (LOCALISED, "mlp")
    assert without.lever("mlp").margin.se_units == with_loo.lever("mlp").margin.se_units
    assert all(row.loo is None and row.interaction is None for row in without.levers)
    assert "- (not scored)" in without.text()
    # one leave-one-out setting lost from a budget scored with them is an error, never a quiet "not scored"
    del full[1].gaps[loo_key("rotary")]
    with pytest.raises(BudgetInputError, match="loo:rotary"):
        judge_budget("near-aligned", full, LEVERS, KNOBS)


def test_a_ruled_out_lever_is_held_even_where_the_rungs_verdict_is_reported():
    from harness.judge.budget import expectation_findings
    from harness.spec.levers import BudgetExpectation

    expected = BudgetExpectation(
        verdict="reported", report="not-sized-on-embedded", ruled_out=["final-norm", "rotary"], design="a test", reason="built to rule out two"
    )
    spread = judge_budget("near-aligned", [seed(s, {"input-norm": 0.05}) for s in range(5)], LEVERS, KNOBS)
    assert expectation_findings(spread, expected) == []
    # the rotary boundary now carries most of the drift: the ruled-out answer fails, naming it
    carried = judge_budget("near-aligned", [seed(s, {"rotary": 0.6}) for s in range(5)], LEVERS, KNOBS)
    (finding,) = expectation_findings(carried, expected)
    assert "rotary ruled out" in finding and "got localised" in finding, finding
