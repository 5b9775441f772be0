"""knobs/readiness.yaml, typed: the seed's "Additional Acceptance Criteria" (ready for Blackwell operator
work?), one check each, and the mismatch knobs a rung may change.

Each criterion names a check of harness.judge.readiness (a house-rule test holds every name to it),
the thresholds it reads, and its pre-registered verdict: met, not met (the design seeds said so; the
record then shows the evidence), or reported (judged and shown in the named report `report` of
knobs/reports.yaml, never a pass). The knob table says which
flags make one knob, so that "each mismatch knob has an isolated metric delta" is checked on the
resolved specs: a rung isolates a knob when every flag it changes against its parent is that knob's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.spec.schema import Strict

READINESS_FILE = "readiness.yaml"
MET, NOT_MET, NOT_CHECKED = "met", "not met", "not checked"


class ReadinessCriterion(Strict):
    id: str
    seed_text: str = Field(min_length=10)  # the seed's words
    check: str  # a function of harness.judge.readiness.CHECKS
    thresholds: list[str] = Field(default_factory=list)  # thresholds.yaml names it reads
    expect: Literal["met", "not met", "reported"] = "met"
    report: str | None = None  # knobs/reports.yaml, exactly when expect is reported
    design: str = Field(min_length=10)  # what the design seeds showed for it, and where
    reason: str = Field(min_length=10)

    @model_validator(mode="after")
    def _report_when_reported(self) -> ReadinessCriterion:
        if (self.report is None) == (self.expect == "reported"):
            raise ValueError("report: a named report (knobs/reports.yaml) is given exactly when expect is reported")
        return self


class Knob(Strict):
    """One mismatch knob (or one mitigation/control switch): the flags that together are that knob."""

    kind: Literal["mismatch", "mitigation", "control", "model"]
    flags: list[str] = Field(min_length=1)
    reason: str = Field(min_length=10)


class ReadinessFile(Strict):
    stage: str  # the ladder stage whose rungs and runs the criteria read (the main job's)
    criteria: list[ReadinessCriterion] = Field(min_length=1)
    knobs: dict[str, Knob] = Field(min_length=1)

    @model_validator(mode="after")
    def _each_flag_one_knob(self) -> ReadinessFile:
        seen: dict[str, str] = {}
        for name, knob in self.knobs.items():
            for flag in knob.flags:
                if flag in seen:
                    raise ValueError(f"knobs.{name}.flags: {flag!r} is already knob {seen[flag]!r}'s (a flag belongs to one knob)")
                seen[flag] = name
        ids = [c.id for c in self.criteria]
        if len(set(ids)) != len(ids):
            raise ValueError("criteria: expected unique ids")
        return self

    def knob_of(self, flag: str) -> str | None:
        return next((name for name, knob in self.knobs.items() if flag in knob.flags), None)
