"""knobs/design.yaml, typed: the seeds the design measured on and the seeds the main job judges, the
margin each expected answer is designed for, what the embedded backend can afford, and (below its
marker line, written by tools/design_sample.py) what was measured and what each question needs."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from harness.spec.load import parse_file
from harness.spec.schema import Strict

DESIGN_FILE = "design.yaml"


class Seeds(Strict):
    judging: int  # the stage seed of knobs/stages.yaml: what the main job judges
    design: int  # where the design measured (never judged by the main job)
    replicates: int = Field(ge=1)  # seeds a run stands for: seed .. seed + replicates - 1
    design_count: int = Field(ge=2)  # seeds a side the design measured on: design .. design + design_count - 1
    sweep_offsets: list[int] = Field(
        min_length=1
    )  # python -m harness sweep: the next confirmatory offsets on the judging seed (never spent: knobs/sweep_ledger.yaml)
    reason: str = Field(min_length=10)


class Valued(Strict):
    value: float
    reason: str = Field(min_length=10)


class Affordable(Strict):
    seeds_per_side: int = Field(ge=1)
    ab_pairs: int = Field(ge=2)
    reason: str = Field(min_length=10)


class Design(Strict):
    target_margin: Valued
    seeds: Seeds
    affordable: Affordable
    measured: dict = Field(default_factory=dict)

    def seed_ranges(self) -> dict[str, range]:
        """Every seed a judged or design run may use, by the key it comes from. A range reaches as far
        as the A/B's pairs (one pair a seed) or the replicates and the A/A check's seed + 1 (it also
        reads seed + 1 of a single-seed run), whichever is longer."""
        seeds = self.seeds
        span = max(seeds.replicates + 1, self.affordable.ab_pairs)
        spans = {"seeds.judging": range(seeds.judging, seeds.judging + span), "seeds.design": range(seeds.design, seeds.design + span)}
        for offset in seeds.sweep_offsets:
            spans[f"seeds.sweep_offsets ({offset:+d})"] = range(seeds.judging + offset, seeds.judging + offset + span)
        return spans

    @model_validator(mode="after")
    def _ranges_do_not_overlap(self) -> Design:
        spans = sorted(self.seed_ranges().items(), key=lambda item: item[1].start)
        for (name_a, a), (name_b, b) in zip(spans, spans[1:]):
            if a.stop > b.start:
                raise ValueError(f"seed ranges {name_a} {a.start}..{a.stop - 1} and {name_b} {b.start}..{b.stop - 1} overlap")
        return self

    @property
    def target_margin_se(self) -> float:
        return float(self.target_margin.value)

    def question(self, name: str) -> dict | None:
        return (self.measured.get("questions") or {}).get(name)


def budget_seed_ranges(design: Design, levers) -> dict[str, range]:
    """The drift budget's own seeds (levers.yaml budget.judging_seed .. + seeds - 1), at no offset and
    moved by each sweep offset as every judged seed is."""
    budget = levers.budget
    return {
        f"levers.yaml budget seeds ({offset:+d})": range(budget.judging_seed + offset, budget.judging_seed + offset + budget.seeds)
        for offset in (0, *design.seeds.sweep_offsets)
    }


def overlap(mine: dict[str, range], others: dict[str, range]) -> tuple[str, range, str, range] | None:
    """The first pair of ranges, one of each, that share a seed."""
    for name, a in mine.items():
        for key, b in others.items():
            if a.start < b.stop and b.start < a.stop:
                return name, a, key, b
    return None


def load_design(knobs_dir: Path) -> Design:
    """design.yaml, checked against the drift budget's seeds where levers.yaml is beside it: at no sweep
    offset may the budget judge seeds the ladder, the A/B or the design use, or its judgement would
    re-use runs another answer was made on."""
    from harness.spec.errors import KnobError
    from harness.spec.levers import LeverFile

    design = parse_file(Path(knobs_dir) / DESIGN_FILE, Design)
    levers_path = Path(knobs_dir) / "levers.yaml"
    if levers_path.exists():
        clash = overlap(budget_seed_ranges(design, parse_file(levers_path, LeverFile)), design.seed_ranges())
        if clash:
            name, a, key, b = clash
            raise KnobError(
                str(levers_path),
                "budget.judging_seed",
                f"seeds no other range uses; {name} {a.start}..{a.stop - 1} share seeds with {DESIGN_FILE} {key} ({b.start}..{b.stop - 1})",
                has_got=False,
            )
    return design
