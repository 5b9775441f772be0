"""Which runs a selection of checks will ask for, known before any of them runs.

A check asks for its runs when it is judged: the first P1 rung asks for its own five seeds and its
parent's, then for the whole family (Holm), the A/B for its pairs, one candidate after another.
Asked for in those pieces, runs launched side by side wait for each other at every piece's end
(a rung's five seeds on two cores: the fifth runs alone). Asked for at once, the launcher keeps
every slot busy. This module lists the requests (stage, rung, mode, overrides) the ladder's family
and the A/B gate make, with the seeds each will use (the stage seed, with any --seed-offset, then
the replicates: harness.experiment.evidence.replicate_sets), so a front end can launch them
together first (fixtures/runs.py). Listing a run here changes nothing about it: it is the same
resolved spec, and the same run id, the check asks for later.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.judge.ladder import family_members
from harness.spec import Knobs, backends
from harness.spec.flag_read import int_flag

Request = tuple[str, str, str, dict]
SpecOf = Callable[..., object]  # (stage, rung, mode, **overrides) -> RunSpec, with the session's seed offset


def ab_replicates(knobs: Knobs, backend: str) -> int:
    """Seeds a side for the judged A/B questions (knobs/ab.yaml replicates; one without it)."""
    chosen = knobs.ab.replicates
    return 1 if chosen is None else getattr(chosen, backends.backend(backend).replicate_section)


def mode_pairs(knobs: Knobs, backend: str) -> int:
    """Pairs a mode for mode consistency (knobs/ab.yaml mode_pairs; the first pair without it)."""
    chosen = knobs.ab.mode_pairs
    return 1 if chosen is None else getattr(chosen, backends.backend(backend).replicate_section)


def replicate_requests(spec_of: SpecOf, stage: str, mode: str, side: tuple[str, dict], count: int) -> list[Request]:
    """A side's run and its replicates, as replicate_sets asks for them."""
    rung_id, flags = side
    first: Request = (stage, rung_id, mode, dict(flags))
    if count <= 1:
        return [first]
    seed = int_flag(spec_of(stage, rung_id, mode, **flags).flags, "seed")
    seed = 1234 if seed is None else seed  # VIME's default seed, as replicate_sets
    return [first] + [(stage, rung_id, mode, {**flags, "seed": seed + i}) for i in range(1, count)]


def ladder_requests(knobs: Knobs, spec_of: SpecOf, stage: str, mode: str, backend: str) -> list[Request]:
    """Every run of the stage's family: each member and its parent at every replicate seed."""
    count = knobs.stages[stage].replicate_count(backend)
    members = family_members(knobs, stage, backend)
    involved = dict.fromkeys(rung_id for member in members for rung_id in (member, knobs.rungs[member].parent) if rung_id)
    return [request for rung_id in involved for request in replicate_requests(spec_of, stage, mode, (rung_id, {}), count)]


def ab_requests(knobs: Knobs, spec_of: SpecOf, mode: str, backend: str) -> list[Request]:
    """The A/B gate's runs: the pair and each further candidate at every replicate seed, and the
    pair's first seeds in the other mode (mode consistency)."""
    chosen = knobs.ab.pair
    if mode not in knobs.stages[chosen.stage].modes:
        return []
    count = ab_replicates(knobs, backend)
    sides = [(chosen.baseline, {}), (chosen.candidate, {})]
    sides += [(chosen.baseline, dict(candidate.set)) for candidate in knobs.ab.candidates.values() if backend in candidate.backends]
    requests = [request for side in sides for request in replicate_requests(spec_of, chosen.stage, mode, side, count)]
    pairs = mode_pairs(knobs, backend)
    return requests + [
        request
        for other in knobs.stages[chosen.stage].modes
        if other != mode
        for rung_id in (chosen.baseline, chosen.candidate)
        for request in replicate_requests(spec_of, chosen.stage, other, (rung_id, {}), pairs)
    ]


def budget_requests(knobs: Knobs, mode: str, seed_offset: int = 0) -> list[Request]:
    """The drift budget's runs (harness.experiment.evidence.budget_runs): each budget rung at the
    budget's own seeds, plus the session's seed offset."""
    if knobs.levers is None or mode not in knobs.stages[knobs.levers.budget.stage].modes:
        return []
    policy = knobs.levers.budget
    first = policy.judging_seed + seed_offset
    return [(policy.stage, rung_id, mode, {"seed": first + i}) for rung_id in policy.rungs for i in range(policy.seeds)]


def selection_requests(knobs: Knobs, spec_of: SpecOf, mode: str, backend: str, ladder_stages, with_ab: bool, seed_offset: int = 0) -> list[Request]:
    """The runs a selection asks for: the A/B gate's when it is selected, then each selected stage's
    ladder family, then the drift budget's runs where its stage is selected, in the order the checks
    ask for them."""
    requests = ab_requests(knobs, spec_of, mode, backend) if with_ab else []
    for stage in ladder_stages:
        requests += ladder_requests(knobs, spec_of, stage, mode, backend)
    if knobs.levers is not None and knobs.levers.budget.stage in ladder_stages:
        requests += budget_requests(knobs, mode, seed_offset)
    return requests
