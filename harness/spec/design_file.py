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


def load_design(knobs_dir: Path) -> Design:
    return parse_file(Path(knobs_dir) / DESIGN_FILE, Design)
