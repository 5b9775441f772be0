"""knobs/candidate.yaml, typed: the candidate operator at the boundary that carries the drift, its A/B
pairs under fixed semantics, the negative control beside it, and the seed's A/B question 4.

The candidate is a registry operator (harness.operators.registry) switched on in both engines by one
operator-path flag; each pair is a rung at a stage against the same rung with that flag set (the same
workload, knobs/ab.yaml's contract); the negative control is a rung with a planted fault at the same
boundary, judged by the same gate. Every expectation is pre-registered from the design seeds
(knobs/design.yaml seeds.design), never from the judging seeds, and names what the design measured.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.spec.schema import Backend, FlagValue, Replicates, Strict, check_flag_names

CANDIDATE_FILE = "candidate.yaml"
# reported: judged and shown in the expectation's named report (knobs/reports.yaml), never held.
REPORTED = "reported"
DriftOutcome = Literal["down", "flat", "up", "reported"]


class PairExpectation(Strict):
    """What a pair is expected to answer on one backend, written from the design seeds."""

    drift: DriftOutcome  # the A/B's drift question over the pairs (harness.judge.outcome)
    # The paired per-token delta on the judging seed's baseline tokens, both configurations scoring them
    # (harness.judge.paired); reported where it cannot be measured (a filter rung) or is not decided.
    paired_drift: DriftOutcome = REPORTED
    reward_preserved: bool | Literal["reported"] = REPORTED  # the reward question's answer
    # The named report (knobs/reports.yaml) the reported answers leave for; `reason` says why.
    report: str | None = None
    design: str = Field(min_length=10)  # what the design seeds measured, and with which tool
    reason: str = Field(min_length=10)

    def reported(self) -> list[str]:
        """The answers this expectation leaves for its report."""
        values = {"drift": self.drift, "paired_drift": self.paired_drift, "reward_preserved": self.reward_preserved}
        return [name for name, value in values.items() if value == REPORTED]

    def holds_nothing(self) -> bool:
        return len(self.reported()) == 3

    @model_validator(mode="after")
    def _report_when_reported(self) -> PairExpectation:
        if (self.report is None) == bool(self.reported()):
            raise ValueError("report: a named report (knobs/reports.yaml) is given exactly when an answer is reported")
        return self


class CandidatePair(Strict):
    """One A/B of the candidate: `rung` at `stage`, native against the candidate's flag set."""

    rung: str
    stage: str = "p3"
    why: str = Field(min_length=10)  # why this rung: the recommended baseline, where it can move, the bf16 path
    expect: dict[Backend, PairExpectation] = Field(default_factory=dict)


class NegativeControl(Strict):
    """A planted fault at the candidate's boundary, judged by the same gate: it must come out increased."""

    rung: str
    stage: str = "p3"
    set: dict[str, FlagValue] = Field(min_length=1)
    why: str = Field(min_length=10)
    expect: dict[Backend, PairExpectation] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _increased(self) -> NegativeControl:
        for backend, expected in self.expect.items():
            if expected.drift != "up":
                raise ValueError(f"expect.{backend}.drift: a negative control must be expected to come out up (increased), got {expected.drift!r}")
        check_flag_names(self.set)
        return self


class MixedPaths(Strict):
    """The seed's A/B question 4, answered from the candidate's effect on a bf16 pair against an fp8 pair."""

    bf16: str  # a pair name
    fp8: str  # a pair name
    expect: dict[Backend, Literal["yes", "no", "reported"]] = Field(default_factory=dict)
    report: str | None = None  # knobs/reports.yaml, where an expect is reported
    design: str = Field(min_length=10)
    reason: str = Field(min_length=10)


class CandidateFile(Strict):
    operator: str  # the registry operator both engines run (harness.operators.registry)
    boundary: str  # the lever of knobs/levers.yaml whose boundary it computes
    flag: str  # the operator-path flag that switches it on (knobs/ab.yaml operator_path_flags)
    backends: list[Backend] = Field(min_length=1)
    replicates: Replicates  # pairs a side: one pair a seed, from the stage seed on
    why: str = Field(min_length=10)  # why this boundary: the drift budget's numbers
    pairs: dict[str, CandidatePair] = Field(min_length=1)
    negative_control: NegativeControl
    mixed_paths: MixedPaths
    # Below the marker line: what tools/candidate_design.py measured on the design seeds.
    measured: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mixed_paths_name_pairs(self) -> CandidateFile:
        for path in ("bf16", "fp8"):
            name = getattr(self.mixed_paths, path)
            if name not in self.pairs:
                raise ValueError(f"mixed_paths.{path}: expected one of pairs ({', '.join(self.pairs)}), got {name!r}")
        return self
