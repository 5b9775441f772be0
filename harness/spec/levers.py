"""knobs/levers.yaml, typed: one lever per boundary of the forward, and the drift budget's policy.

A lever makes both engines compute one boundary alike and leaves every other boundary native. Its
switches are the embedded trainer's (harness.embedded.true_on_policy.SWITCHES: ``engine-*`` change the
rollout engine, ``trainer-*`` the trainer; a test holds every name to that table and every switch
to one lever). The drift budget (docs/attribution.md, "The drift budget") turns each lever on alone
(add-one) and every operator lever on but that one (leave-one-out) on a rung's own sampled tokens;
a contract lever (the processed-logprob replay) is measured alone and is never an operator answer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.spec.schema import Strict

LEVERS_FILE = "levers.yaml"
SIDES = {"engine-": "engine", "trainer-": "trainer"}


class Lever(Strict):
    """One boundary's lever."""

    boundary: str = Field(min_length=3)  # the boundary of the forward it aligns, in words
    side: Literal["engine", "trainer", "both"]  # which engine's computation the lever changes
    # The embedded switches it turns on (harness.embedded.true_on_policy.SWITCHES); empty only for
    # a contract lever, whose one change is `replay`.
    switches: list[str] = Field(default_factory=list)
    kind: Literal["operator", "contract"] = "operator"  # contract: a change of the sampling contract, never an operator answer
    replay: bool = False  # the trainer replays the rollout's processed-logprob contract (contract levers only)
    reason: str = Field(min_length=10)  # why this is the boundary's lever, and what it leaves native
    # The boundary table's rows (harness.embedded.capture.boundary_names, fnmatch patterns) this
    # boundary is computed inside: where the envelope table, the second witness, would see it.
    envelope_rows: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Lever:
        sides = set()
        for name in self.switches:
            prefix = next((p for p in SIDES if name.startswith(p)), None)
            if prefix is None:
                raise ValueError(f"switches: {name!r}: expected an engine-* or trainer-* switch name")
            sides.add(SIDES[prefix])
        if self.kind == "contract":
            if not self.replay or self.switches:
                raise ValueError("kind contract: expected replay: true and no switches (a contract lever changes the contract, not a kernel)")
            if self.side != "trainer":
                raise ValueError("kind contract: the replay changes the trainer's contract: side must be trainer")
            return self
        if self.replay:
            raise ValueError("replay: only a contract lever replays the processed contract")
        if not self.switches:
            raise ValueError("switches: an operator lever needs at least one switch")
        expected = sides.pop() if len(sides) == 1 else "both"
        if self.side != expected:
            raise ValueError(f"side: the switches change the {expected} side(s), got {self.side!r}")
        return self


class Share(Strict):
    """The share, named as a threshold of thresholds.yaml (one decision, one place), with the reason
    it is the localisation's share."""

    threshold: str = Field(min_length=3)
    reason: str = Field(min_length=10)


class BudgetExpectation(Strict):
    """A rung's pre-registered localisation answer (from the design seeds, never the judged ones)."""

    # reported: the design could not size the answer; it leaves for `report` (knobs/reports.yaml), `reason` says why.
    verdict: Literal["localised", "not localised", "reported"]
    report: str | None = None
    # The lever the drift is expected to be localised to; None with verdict localised: to some boundary
    # (the design found more than one past the share, their order not decided), reported either way.
    boundary: str | None = None
    # Operator levers the design ruled out (not localised) far enough from the share for the budget's
    # sample: judged whatever the rung's verdict, so a reported rung still has answers that can fail.
    ruled_out: list[str] = Field(default_factory=list)
    design: str = Field(min_length=3)  # where the design measured it (the tool and its record)
    reason: str = Field(min_length=10)

    @model_validator(mode="after")
    def _boundary_with_localised(self) -> BudgetExpectation:
        if self.boundary is not None and self.verdict != "localised":
            raise ValueError("boundary: a lever is named only when the verdict is localised")
        if self.boundary is not None and self.boundary in self.ruled_out:
            raise ValueError(f"ruled_out: {self.boundary} is the boundary the verdict localises to")
        if (self.report is None) == (self.verdict == "reported"):
            raise ValueError("report: a named report (knobs/reports.yaml) is given exactly when the verdict is reported")
        return self


class BudgetPolicy(Strict):
    """Which rungs the main job measures a budget for, when a rung's drift is localised, and what
    each rung is expected to answer."""

    rungs: list[str] = Field(min_length=1)  # the rungs whose runs are re-scored (at every replicate seed)
    stage: str = "p1"  # the stage whose runs they are (the main job's ladder stage)
    # The budget's own sample: the rung's runs at seeds judging_seed .. judging_seed + seeds - 1 (the
    # stage's spec otherwise), a seed range no other answer and no earlier budget judgement used.
    seeds: int = Field(ge=1)
    judging_seed: int
    # A rung's drift is localised to boundary X when aligning X alone removes at least this share of
    # it, at thresholds.min_margin_se standard errors or more.
    min_localised_share: Share
    expect: dict[str, BudgetExpectation] = Field(default_factory=dict)  # rung -> its expected answer
    reason: str = Field(min_length=10)

    @model_validator(mode="after")
    def _expectations_name_budget_rungs(self) -> BudgetPolicy:
        unknown = sorted(set(self.expect) - set(self.rungs))
        if unknown:
            raise ValueError(f"expect.{unknown[0]}: not one of budget.rungs {self.rungs}")
        return self


class LeverFile(Strict):
    levers: dict[str, Lever] = Field(min_length=1)  # in the forward's order
    budget: BudgetPolicy
    # Below the marker line: what tools/budget_design.py measured on the design seeds.
    measured: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _expected_boundaries_are_levers(self) -> LeverFile:
        for rung, expected in self.budget.expect.items():
            if expected.boundary is not None and expected.boundary not in self.operator_levers():
                raise ValueError(
                    f"budget.expect.{rung}.boundary: expected an operator lever ({', '.join(self.operator_levers())}), got {expected.boundary!r}"
                )
            unknown = [name for name in expected.ruled_out if name not in self.operator_levers()]
            if unknown:
                raise ValueError(
                    f"budget.expect.{rung}.ruled_out: expected operator levers ({', '.join(self.operator_levers())}), got {unknown[0]!r}"
                )
        return self

    @model_validator(mode="after")
    def _each_switch_once(self) -> LeverFile:
        seen: dict[str, str] = {}
        for name, lever in self.levers.items():
            for switch in lever.switches:
                if switch in seen:
                    raise ValueError(f"levers.{name}.switches: {switch!r} is already lever {seen[switch]!r}'s (each switch aligns one boundary)")
                seen[switch] = name
        return self

    def operator_levers(self) -> dict[str, Lever]:
        return {name: lever for name, lever in self.levers.items() if lever.kind == "operator"}

    def all_operator_switches(self) -> frozenset[str]:
        return frozenset(s for lever in self.operator_levers().values() for s in lever.switches)
