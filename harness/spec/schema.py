"""Typed knob files. Parsed once by harness.spec.load; raw dicts never travel past the loader.

Every model forbids unknown keys, so a typo in a knob file is an error naming the key rather
than a setting silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.spec import backends


def _known_backend(name: str) -> str:
    if name not in backends.names():
        raise ValueError(f"expected one of {', '.join(backends.names())} (the modules of harness/spec/backends/), got {name!r}")
    return name


Mode = Literal["colocate", "non-colocate"]
Backend = Annotated[str, AfterValidator(_known_backend)]
# undetermined: the delta was inconclusive (harness.judge.outcome), so no class is decided on it.
# undecided: a probe the class needs could not run (harness.attribution.probes names it: "undecided: needs X").
DriftClass = Literal["none", "expected-numerical", "semantic", "framework", "candidate-operator", "undetermined", "undecided"]
DIRECTION_OUTCOMES = ("up", "down", "flat", "inconclusive")
# What a rung may expect: exactly one outcome, written before the runs it judges (knobs/design.yaml).
# An answer the main job does not hold leaves its answers for a named report (`Reported`, knobs/reports.yaml).
ExpectedDirection = Literal["up", "down", "flat"]
ExpectedClass = Literal["none", "expected-numerical", "semantic", "framework", "candidate-operator"]

MODES: tuple[str, ...] = ("colocate", "non-colocate")
DRIFT_CLASSES: tuple[str, ...] = ("none", "expected-numerical", "semantic", "framework", "candidate-operator")

# A VIME flag as written in knobs: the flag name without dashes. `true` is a bare switch,
# `null` removes the flag an earlier layer set, a list is an nargs flag's values
# (`--vllm-cudagraph-capture-sizes 1 2 4`), anything else is the flag's value.
FlagScalar = bool | int | float | str
FlagValue = bool | int | float | str | list[int | float | str] | None
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
        """The dicts to apply, in order, for one backend: the shared flags, then its section's."""
        return [self.flags, getattr(self, backends.backend(backend).knob_section)]


VimeLine = Literal["rl-align", "upstream"]
VIME_LINES: tuple[str, ...] = ("rl-align", "upstream")


class ModelChoice(Strict):
    """Which knobs/models/<id>.yaml each backend runs: the cluster model and the miniature."""

    vime: str
    embedded: str
    # The model whose checkpoints knobs/' `/path/to/...` placeholders name. Another cluster model
    # (a site's `model:`, or `vime` above) renders them under its own name, so a site never runs
    # it on this model's checkpoints without a word (harness/spec/models.py).
    placeholders: str | None = None


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
        return getattr(self.replicates, backends.backend(backend).replicate_section)


class Hardware(Strict):
    """A node type: how many GPUs one node holds (VIME's --num-gpus-per-node)."""

    gpus_per_node: int = Field(alias="gpus-per-node", ge=1)
    # Memory of one GPU, GiB: the capacity check compares a model's training state with it
    # (harness/spec/capacity.py). None: not checked.
    gpu_memory_gib: float | None = Field(None, alias="gpu-memory-gib", gt=0)
    why: str = Field(min_length=10)


class StagesFile(Strict):
    hardware: dict[str, Hardware] = Field(default_factory=dict)
    stages: dict[str, Stage]


class Reported(Strict):
    """An answer that is not one of the main job's answers: it is judged and shown in a named report
    (knobs/reports.yaml `reports`), never as a pass or a failure of the main job."""

    report: str  # a key of knobs/reports.yaml reports
    reason: str = Field(min_length=20)  # why this answer is not held, with the numbers that say so


ReportedAnswer = Literal["direction", "class"]


class NamedReport(Strict):
    """A report outside the main job's answers (knobs/reports.yaml): what it holds and why those
    answers are not held by the main job."""

    title: str = Field(min_length=5)
    reason: str = Field(min_length=20)


class ReportsFile(Strict):
    reports: dict[str, NamedReport] = Field(min_length=1)


class Expectation(Strict):
    # Named `class` in the YAML (the seed's word); `drift_class` in code. One class, or the class
    # answer leaves for a named report (`reported.class`).
    drift_class: ExpectedClass | None = Field(None, alias="class")
    # Classes the evidence must rule out whatever the delta decides (framework: probes 1-2 pass on
    # every run; semantic: probe 6 passes on the rung's runs, or the replay removes too little).
    rules_out: list[DriftClass] = Field(default_factory=list)
    # One outcome against the parent (a root has none), or the direction leaves for a named report.
    direction: ExpectedDirection | None = None
    # The rung's answers that are not the main job's (direction, class): each in a named report, with why.
    reported: dict[ReportedAnswer, Reported] = Field(default_factory=dict)
    # The knobs/design.yaml question this expectation was designed under (its measurement on the
    # design seeds, the sample it needs, and whether the main job expects it).
    design: str | None = None
    max_abs_diff: str | None = None
    # The rung's mean over the stage's seeds known to within this share of itself: the 95% interval's
    # half-width over the mean of the side (harness.judge.variance.side_estimate: the run means' spread
    # over the seeds; on one seed its own steps' noise plus the design's A/A seed variance).
    max_rel_side_ci_halfwidth: str | None = None
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
        fields = ("max_abs_diff", "max_rel_side_ci_halfwidth", "max_rel_trend", "min_abs_diff")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}

    @model_validator(mode="after")
    def _each_answer_expected_or_reported(self) -> Expectation:
        if self.drift_class is None and "class" not in self.reported:
            raise ValueError("class: expected one drift class, or reported.class naming the report it leaves for")
        if self.drift_class is not None and "class" in self.reported:
            raise ValueError("class and reported.class: an answer is expected or reported, not both")
        if self.direction is not None and "direction" in self.reported:
            raise ValueError("direction and reported.direction: an answer is expected or reported, not both")
        return self

    @property
    def class_expected(self) -> bool:
        return self.drift_class is not None

    @property
    def direction_expected(self) -> bool:
        return self.direction is not None


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
    backends: list[Backend] = Field(default_factory=lambda: list(backends.names()))
    why: str
    expect: Expectation
    changes: FlagLayer = Field(default_factory=FlagLayer)
    # What this rung becomes on a real VIME cluster when VIME cannot express it as written.
    on_vime: VimeCaveat | None = Field(None, alias="on-vime")

    @model_validator(mode="after")
    def _direction_needs_a_parent(self) -> Rung:
        if self.parent is None and (self.expect.direction is not None or "direction" in self.expect.reported):
            raise ValueError("expect.direction: a root rung has no parent to move against; leave direction out")
        if self.expect.direction == "down" and self.expect.drift_class is not None:
            # The drift a rung removes is its parent's: the judge decides that class on the parent's
            # evidence (harness.judge.drift_class), so it is the parent's answer, not this rung's.
            raise ValueError("expect.class: a rung expected down has its class decided on its parent's evidence; send it to reported.class")
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
    # The knobs/design.yaml question (acceptance/<id>) that sized it.
    design: str | None = None
    # backend -> the named report the criterion leaves for there, with why; elsewhere it must pass.
    reported: dict[Backend, Reported] = Field(default_factory=dict)


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


class ExpectedAnswers(Strict):
    """What the gate is expected to answer for this pair's candidate on one backend, where that is
    not a pass: the candidate is measured, and the gate's measured answer is the finding."""

    # question -> its expected answer: true (passes), false (a decided no), or the named report it
    # leaves for (judged and shown there, never a pass or failure of the main job).
    answers: dict[str, bool | Reported]
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
    # Pairs a mode for mode consistency (colocate vs non-colocate): each mode's pair at seeds seed ..
    # seed + count - 1, sized by knobs/design.yaml (ab/mode-consistency/<mode>). None: the first pair.
    mode_pairs: Replicates | None = None
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

    def expected_to_pass(self, question: str, backend: str, candidate: str | None = None) -> tuple[bool | Reported, str]:
        """Whether the gate is expected to pass `question` on `backend` for the pair's candidate (or
        the named one of `candidates`), and the reason when not; a Reported when it leaves for a named report."""
        expected = (self.candidates[candidate].expect if candidate else self.expect).get(backend)
        if expected is None or question not in expected.answers:
            return True, ""
        return expected.answers[question], expected.reason
