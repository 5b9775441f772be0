"""The plan (harness.experiment.plan) lists the runs the ladder's family and the A/B gate ask for,
with the seeds they ask for them at, so that launching the plan first leaves nothing to launch later."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.evidence import replicate_sets
from harness.experiment.plan import ab_replicates, ab_requests, ladder_requests, mode_pairs
from harness.experiment.runs import Fetch, RunSource
from harness.judge.ladder import family_members
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


class AskedFor:
    """Stands in for the run source behind a Fetch: notes each run id asked for and answers with the
    resolved spec only (all replicate_sets reads of a first run is its seed)."""

    def __init__(self, source: RunSource):
        self.source, self.asked = source, set()
        self.seed_offset = source.seed_offset

    def many(self, requests):
        specs = [self.source.spec(stage, rung, mode, **overrides) for stage, rung, mode, overrides in requests]
        self.asked |= {spec.run_id for spec in specs}
        return [SimpleNamespace(spec=SimpleNamespace(flag=spec.flags.get)) for spec in specs]


@pytest.mark.parametrize("offset", [0, 300])
def test_the_plan_is_every_run_the_family_and_the_ab_gate_ask_for(tmp_path, offset):
    source = RunSource(KNOBS, "embedded", tmp_path, seed_offset=offset, find_only=True)
    asked = AskedFor(source)
    count = KNOBS.stages["p1"].replicate_count("embedded")
    for member in family_members(KNOBS, "p1", "embedded"):
        replicate_sets([member, KNOBS.rungs[member].parent], Fetch(asked, "p1", "colocate"), count)
    pair = KNOBS.ab.pair
    fetch = Fetch(asked, pair.stage, "colocate")
    pairs = ab_replicates(KNOBS, "embedded")
    replicate_sets([pair.baseline, pair.candidate], fetch, pairs)
    for candidate in KNOBS.ab.candidates.values():
        replicate_sets([pair.baseline, (pair.baseline, dict(candidate.set))], fetch, pairs)
    replicate_sets([pair.baseline, pair.candidate], Fetch(asked, pair.stage, "non-colocate"), mode_pairs(KNOBS, "embedded"))

    planned = ladder_requests(KNOBS, source.spec, "p1", "colocate", "embedded") + ab_requests(KNOBS, source.spec, "colocate", "embedded")
    planned_ids = {source.spec(stage, rung, mode, **overrides).run_id for stage, rung, mode, overrides in planned}
    assert planned_ids == asked.asked  # P3's baseline is P1's fp8-plus-filters run: one id, launched once (RunSource.many)
    seeds = {source.spec(*request[:3], **request[3]).flags["seed"] for request in planned}
    assert min(seeds) == 2026 + offset  # the judging seed, moved by the sweep's offset


def test_a_mode_the_ab_stage_does_not_run_plans_no_ab_runs(tmp_path):
    source = RunSource(KNOBS, "embedded", tmp_path, find_only=True)
    stage_modes = KNOBS.stages[KNOBS.ab.pair.stage].modes
    for mode in ("colocate", "non-colocate"):
        assert bool(ab_requests(KNOBS, source.spec, mode, "embedded")) == (mode in stage_modes)


@pytest.mark.parametrize("offset", [0, 300])
def test_the_plan_holds_every_run_the_drift_budget_asks_for(tmp_path, offset):
    from harness.experiment.evidence import budget_runs
    from harness.experiment.plan import budget_requests

    source = RunSource(KNOBS, "embedded", tmp_path, seed_offset=offset, find_only=True)
    asked = AskedFor(source)
    fetch = Fetch(asked, KNOBS.levers.budget.stage, "colocate")
    for rung_id in KNOBS.levers.budget.rungs:
        budget_runs(rung_id, KNOBS, fetch)
    planned = budget_requests(KNOBS, "colocate", offset)
    assert {source.spec(stage, rung, mode, **overrides).run_id for stage, rung, mode, overrides in planned} == asked.asked
    seeds = {overrides["seed"] for *_, overrides in planned}
    assert min(seeds) == KNOBS.levers.budget.judging_seed + offset  # the budget's own seeds, moved by a sweep's offset


def test_the_main_job_asks_for_the_budgets_own_seeds_plus_the_sweeps_offset(tmp_path):
    """The drift budget names its seeds itself (knobs/levers.yaml budget.judging_seed onwards), so the
    offset must reach it through the fetch: through the main job's Provision it did not, and the sweep
    at +1600..+2000 judged the budget at 5026-5030 five times while the plan launched 6626-6630."""
    from harness.experiment.evidence import budget_runs
    from harness.experiment.plan import budget_requests
    from harness.experiment.provision import Provision
    from harness.experiment.runs import RunNotFound

    offset = 1600
    first = KNOBS.levers.budget.judging_seed + offset
    provision = Provision(RunSource(KNOBS, "embedded", tmp_path, seed_offset=offset, find_only=True), write_line=lambda line: None)
    with pytest.raises(RunNotFound, match=rf"seed {first}\b"):
        budget_runs("near-aligned", KNOBS, provision.fetcher(KNOBS.levers.budget.stage, "colocate"))
    planned = {int(r[3]["seed"]) for r in budget_requests(KNOBS, "colocate", offset) if r[1] == "near-aligned"}
    assert min(planned) == first, "the plan launches the seeds the budget then asks for"
