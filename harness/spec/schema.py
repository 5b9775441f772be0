"""Typed knob files. Parsed once by harness.spec.load; raw dicts never travel past the loader.

Every model forbids unknown keys, so a typo in a knob file is an error naming the key rather
than a setting silently ignored.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Mode = Literal["colocate", "non-colocate"]
Backend = Literal["embedded", "vime", "records"]
# undetermined: the delta was inconclusive (harness.judge.outcome), so no class is decided on it.
# undecided: a probe the class needs could not run (harness.attribution.probes names it: "undecided: needs X").
DriftClass = Literal["none", "expected-numerical", "semantic", "framework", "candidate-operator", "undetermined", "undecided"]
DIRECTION_OUTCOMES = ("up", "down", "flat", "inconclusive")
# What a rung may expect: exactly one outcome, written before the runs it judges (knobs/design.yaml),
# or `not-expected`: the answer is judged and reported with its margin, but the design found no
# affordable sample that decides it far from its boundary, so the main job does not expect it.
NOT_EXPECTED = "not-expected"
ExpectedDirection = Literal["up", "down", "flat", "not-expected"]
ExpectedClass = Literal["none", "expected-numerical", "semantic", "framework", "candidate-operator", "not-expected"]

MODES: tuple[str, ...] = ("colocate", "non-colocate")
BACKENDS: tuple[str, ...] = ("embedded", "vime", "records")
DRIFT_CLASSES: tuple[str, ...] = ("none", "expected-numerical", "semantic", "framework", "candidate-operator")

# A VIME flag as written in knobs: the flag name without dashes. `true` is a bare switch,
# `null` removes the flag an earlier layer set, anything else is the flag's value.
FlagValue = bool | int | float | str | None
FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def check_flag_names(flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
    for name in flags:
        if not FLAG_NAME.match(name):
            raise ValueError(f"flag name {name!r} is not a VIME flag name (lower-case words joined by '-', no leading dashes)")
    return flags


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlagLayer(Strict):
    """Flags for every backend, then per-backend additions (`vime` also serves `records`)."""

    flags: dict[str, FlagValue] = Field(default_factory=dict)
    vime: dict[str, FlagValue] = Field(default_factory=dict)
    embedded: dict[str, FlagValue] = Field(default_factory=dict)

    @field_validator("flags", "vime", "embedded")
    @classmethod
    def _flag_names_are_vime_style(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return check_flag_names(flags)

    def for_backend(self, backend: str) -> list[dict[str, FlagValue]]:
        """The dicts to apply, in order, for one backend."""
        section = self.embedded if backend == "embedded" else self.vime
        return [self.flags, section]


VimeLine = Literal["rl-align", "upstream"]
VIME_LINES: tuple[str, ...] = ("rl-align", "upstream")


class ModelChoice(Strict):
    """Which knobs/models/<id>.yaml each backend runs: the cluster model and the miniature."""

    vime: str
    embedded: str


class BaseConfig(FlagLayer):
    description: str = ""
    # The VIME line the cluster runs: picks the flag table (knobs/vime/flags-<line>.yaml) and the
    # line's own validations (RL-Align adds sampling checks upstream does not have).
    vime_line: VimeLine = Field("rl-align", alias="vime-line")
    model: ModelChoice | None = None
    modes: dict[Mode, FlagLayer]


class Replicates(Strict):
    """How many seeds every run of a stage's ladder is made with (seed, seed + 1, ...): on the
    embedded backend, and on a cluster (vime; records reads what was recorded the same way)."""

    embedded: int = Field(1, ge=1)
    cluster: int = Field(1, ge=1)
    why: str = Field(min_length=10)


class Stage(FlagLayer):
    title: str
    hardware: str
    nodes: int = Field(ge=1)
    gpus: int = Field(ge=1)
    modes: list[Mode] = Field(min_length=1)
    purpose: str
    replicates: Replicates | None = None

    def replicate_count(self, backend: str) -> int:
        if self.replicates is None:
            return 1
        return self.replicates.embedded if backend == "embedded" else self.replicates.cluster


class Hardware(Strict):
    """A node type: how many GPUs one node holds (VIME's --num-gpus-per-node)."""

    gpus_per_node: int = Field(alias="gpus-per-node", ge=1)
    why: str = Field(min_length=10)


class StagesFile(Strict):
    hardware: dict[str, Hardware] = Field(default_factory=dict)
    stages: dict[str, Stage]


class Expectation(Strict):
    # Named `class` in the YAML (the seed's word); `drift_class` in code. One class, or not-expected
    # (then `design` names the knobs/design.yaml question that says, with numbers, why not).
    drift_class: ExpectedClass = Field(alias="class")
    # Classes the evidence must rule out whatever the delta decides (framework: probes 1-2 pass on
    # every run; semantic: probe 6 passes on the rung's runs, or the replay removes too little).
    rules_out: list[DriftClass] = Field(default_factory=list)
    # One outcome against the parent, or not-expected (with `design`); a root has none.
    direction: ExpectedDirection | None = None
    # The knobs/design.yaml question this expectation was designed under (its measurement on the
    # design seeds, the sample it needs, and whether the main job expects it).
    design: str | None = None
    max_abs_diff: str | None = None
    max_rel_ci_halfwidth: str | None = None
    max_rel_trend: str | None = None
    # A floor under the mean: the fp32 floor's exactly-zero drift means a side compared with itself.
    min_abs_diff: str | None = None
    # Metrics that must be exactly 0.0 at every step of the run (no warm-up, no missing step, no
    # tolerance): the true-on-policy rung, where the trainer's log-probs are the engine's bit for bit.
    # Judged by harness.judge.exact_zero.
    exactly_zero_every_step: list[str] = Field(default_factory=list)

    @field_validator("exactly_zero_every_step")
    @classmethod
    def _metric_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[a-z_]+/[a-z0-9_/]+$", name):
                raise ValueError(f"{name!r} is not a metric name (group/name as VIME logs it, e.g. train/ppo_kl)")
        return names

    def bound_names(self) -> dict[str, str]:
        """{field: threshold name} of the bounds this rung declares."""
        fields = ("max_abs_diff", "max_rel_ci_halfwidth", "max_rel_trend", "min_abs_diff")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}

    @model_validator(mode="after")
    def _not_expected_names_its_design(self) -> Expectation:
        if NOT_EXPECTED in (self.drift_class, self.direction) and not self.design:
            raise ValueError("class or direction is not-expected: `design` must name the knobs/design.yaml question that says why")
        return self

    @property
    def class_expected(self) -> bool:
        return self.drift_class != NOT_EXPECTED

    @property
    def direction_expected(self) -> bool:
        return self.direction is not None and self.direction != NOT_EXPECTED


class VimeCaveat(Strict):
    """`skip`: not run on VIME (the reason says why and where it is measured instead);
    `equivalent`: run as its nearest honest equivalent, which `changes.vime` renders and the
    reason describes. `lines` limits the caveat to some VIME lines (default: every line)."""

    action: Literal["skip", "equivalent"]
    reason: str = Field(min_length=20)
    lines: list[VimeLine] = Field(default_factory=lambda: list(VIME_LINES))


class Rung(Strict):
    id: str
    title: str
    parent: str | None
    stages: list[str] = Field(min_length=1)
    backends: list[Backend] = Field(default_factory=lambda: list(BACKENDS))
    why: str
    expect: Expectation
    changes: FlagLayer = Field(default_factory=FlagLayer)
    # What this rung becomes on a real VIME cluster when VIME cannot express it as written.
    on_vime: VimeCaveat | None = Field(None, alias="on-vime")

    @model_validator(mode="after")
    def _direction_needs_a_parent(self) -> Rung:
        if self.parent is None and self.expect.direction is not None:
            raise ValueError("expect.direction: a root rung has no parent to move against; leave direction out")
        return self


class Threshold(Strict):
    value: float | int
    reason: str = Field(min_length=10)
    unit: str = ""


class ThresholdsFile(Strict):
    thresholds: dict[str, Threshold]


class Criterion(Strict):
    id: str
    seed_text: str
    check: str
    why: str = ""
    thresholds: list[str] = Field(default_factory=list)
    # pass (the default), or not-expected: judged and reported with its margin, but knobs/design.yaml
    # (question acceptance/<id>, named by `design`) measured it too near its boundary to expect it.
    expect: Literal["pass", "not-expected"] = "pass"
    design: str | None = None

    @model_validator(mode="after")
    def _not_expected_names_its_design(self) -> Criterion:
        if self.expect == NOT_EXPECTED and not self.design:
            raise ValueError("expect is not-expected: `design` must name the knobs/design.yaml question that says why")
        return self


class AcceptanceFile(Strict):
    judges: dict[str, str]
    criteria: list[Criterion] = Field(min_length=1)


class FlagList(Strict):
    flags: list[str] = Field(min_length=1)
    reason: str = Field(min_length=10)


class FlagWithReason(Strict):
    flag: str
    reason: str = Field(min_length=10)


class Reason(Strict):
    reason: str = Field(min_length=10)


class ClassificationFile(Strict):
    precision_flags: FlagList
    workload_flags: FlagList
    semantic_replay: FlagWithReason
    identity_contract: Reason


class ABPair(Strict):
    """The two rungs the P3 A/B gate compares, at one stage, under the same workload."""

    baseline: str
    candidate: str
    stage: str
    reason: str = Field(min_length=10)


class GatedBackends(Strict):
    """Where an A/B question's answer fails the test; elsewhere it is judged and recorded only."""

    backends: list[Backend] = Field(min_length=1)
    reason: str = Field(min_length=10)


class ExpectedAnswers(Strict):
    """What the gate is expected to answer for this pair's candidate on one backend, where that is
    not a pass: the candidate is measured, and the gate's measured answer is the finding."""

    # question -> its expected answer: true (passes), false (a decided no), or not-expected: judged and
    # reported with its margin, but knobs/design.yaml (question ab/<pair or candidate>/<question>)
    # found no affordable sample that decides it far from its boundary.
    answers: dict[str, bool | Literal["not-expected"]]
    reason: str = Field(min_length=10)


class ABCandidate(Strict):
    """A further candidate judged against the pair's baseline, at the pair's stage and under the
    same contract: the baseline rung with `set` on top, so the baseline's runs are the pair's own."""

    set: dict[str, FlagValue] = Field(min_length=1)
    backends: list[Backend] = Field(min_length=1)
    reason: str = Field(min_length=10)
    # backend -> expected answers, as ABFile.expect (a question not listed is expected to pass).
    expect: dict[str, ExpectedAnswers] = Field(default_factory=dict)

    @field_validator("set")
    @classmethod
    def _flag_names_are_vime_style(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return check_flag_names(flags)


class ABFile(Strict):
    pair: ABPair
    # Seeds a side for the judged questions (one pair a seed: seed, seed + 1, ...), sized by
    # knobs/design.yaml; the contract and the summary rows read the first pair. None: one seed.
    replicates: Replicates | None = None
    # backend -> expected answers (question -> passes?); a question not listed is expected to pass.
    expect: dict[str, ExpectedAnswers] = Field(default_factory=dict)
    # name -> a further candidate against pair.baseline at pair.stage (same questions, same contract).
    candidates: dict[str, ABCandidate] = Field(default_factory=dict)
    operator_path_flags: FlagList
    # Mitigations (TIS, routing replay): a candidate may switch them on; they change the loss and the
    # training trajectory, never the sampled-token contract, and the record names them.
    mitigation_flags: FlagList
    sampling_contract_flags: FlagList
    # Which log-prob the trainer computes for a sampled token (the processed-logprob replay): a candidate
    # changing one is a contract change, never an operator result (harness.judge.candidate_gate).
    logprob_contract_flags: FlagList | None = None
    # Planted faults a negative control may switch on (its one change; it must come out "increased").
    planted_fault_flags: FlagList | None = None
    # question name (harness.judge.ab.QUESTIONS) -> the backends where it gates; absent: everywhere.
    gated_on: dict[str, GatedBackends] = Field(default_factory=dict)

    def expected_to_pass(self, question: str, backend: str, candidate: str | None = None) -> tuple[bool | str, str]:
        """Whether the gate is expected to pass `question` on `backend` for the pair's candidate (or
        the named one of `candidates`), and the reason when not; "not-expected" when it is reported only."""
        expected = (self.candidates[candidate].expect if candidate else self.expect).get(backend)
        if expected is None or question not in expected.answers:
            return True, ""
        return expected.answers[question], expected.reason
