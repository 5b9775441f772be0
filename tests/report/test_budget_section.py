"""The experiment page's drift budget: boundary x share per rung, the table with the interaction,
the verdict, and a budget that could not be measured said so (harness.report.budget_section)."""

from __future__ import annotations

import numpy as np

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.recorder import Recorder
from harness.judge.budget import ALL, NATIVE, SeedScores, add_key, judge_budget, loo_key
from harness.judge.evidence import BudgetNotMeasured
from harness.report.experiment_page import render_page
from harness.report.experiment_record import add_entry, new_record
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def _seed(seed: int) -> SeedScores:
    rng = np.random.default_rng(seed)
    native = 1e-3 * (1 + 0.2 * rng.random(64))
    gaps = {NATIVE: native, ALL: 0 * native}
    for name, lever in KNOBS.levers.levers.items():
        gaps[add_key(name)] = native * (0.7 if name == "fp8-weights" else 1.0)
        if lever.kind == "operator":
            gaps[loo_key(name)] = native * (0.6 if name in ("fp8-weights", "input-norm") else 0.0)
    return SeedScores(run=f"run-{seed}", seed=seed, gaps=gaps, tokens=1200, rollouts=(2, 4), replay={})


def _record(budgets):
    record, entries = new_record(argv=["pytest"]), []
    recorder = Recorder(
        KNOBS, "embedded", lambda row: None, lambda kind, entry: entries.append((kind, entry)), "tests/attribution/test_drift_budget.py::x"
    )
    for rung, budget in budgets:
        recorder.budget(rung, budget, KNOBS.levers.budget.expect.get(rung))
    for kind, entry in entries:
        add_entry(record, kind, entry)
    return record


def test_the_page_draws_each_rungs_budget_with_its_interaction_and_verdict():
    budget = judge_budget("fp8-rollout", [_seed(1), _seed(2)], KNOBS.levers, KNOBS)
    page = render_page(_record([("fp8-rollout", budget), ("near-aligned", BudgetNotMeasured("run r1 ran on backend 'vime'"))]))
    section = page[page.index("Where the drift lives") :]
    assert 'aria-label="drift budget"' in section, "the boundary x share figure"
    assert section.count("<tr>") >= len(KNOBS.levers.levers), "one table row a lever"
    assert "interaction (LOO - add)" in section and "localised to fp8-weights" in section
    assert "not measured: run r1 ran on backend" in section
    answers = page[page.index("Answers and margins") :]
    assert "budget/fp8-rollout" in answers


def test_each_ruled_out_lever_is_an_expected_answer_of_its_own():
    """budget.expect.<rung>.ruled_out is judged even where the rung's verdict is reported: the record
    carries one expected answer per lever, so a sweep counts it (and a lever that comes out
    localised reads so)."""
    budget = judge_budget("fp8-rollout", [_seed(1), _seed(2)], KNOBS.levers, KNOBS)
    expected = KNOBS.levers.budget.expect["fp8-rollout"]
    assert expected.ruled_out, "the fixture rung rules levers out"
    answers = {a.key: a for a in _record([("fp8-rollout", budget)]).answers}
    for lever in expected.ruled_out:
        answer = answers[f"budget/fp8-rollout/{lever}"]
        row = budget.lever(lever)
        assert answer.expected == "not localised" and answer.observed == row.localisation
        assert answer.margin.se_units == -row.margin.se_units and answer.margin.answer == "not localised"
    missing = {a.key: a for a in _record([("fp8-rollout", BudgetNotMeasured("no runs"))]).answers}
    assert all(missing[f"budget/fp8-rollout/{lever}"].observed == "not measured" for lever in expected.ruled_out)
