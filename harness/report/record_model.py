"""The experiment record as typed objects: one model the writer builds and the page reads.

    ExperimentRecord   experiment.json: session, rows, rungs, ab, environment, worst_tokens,
                       outcomes, answers, budgets, readiness, candidate, min_margin_se
                       (harness.report.experiment_record writes it)

The fields are the keys written to disk, so a record written before these models loads unchanged.
The entries we write are `extra="forbid"`: a misspelt key fails where it is built or read, not as a
blank cell on the page. The run's environment parts are harness.records.environment's: typed for
the keys the page reads, open to the keys it may add, written back with the keys they came with.
What other modules compute and we only carry (a judge's evidence and decision, the token audit's
rows) stays a plain dict inside its entry.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, model_serializer

from harness.report.summary import SummaryRow

SCHEMA = 1


class _Entry(BaseModel):
    # NaN is a value here ("not measured"), as in the JSON the writer has always produced.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)


class TestRef(_Entry):
    """How the page names and links the Allure test that produced an entry."""

    __test__ = False  # not a pytest class
    nodeid: str
    name: str
    title: str


def _summary_row_fields() -> dict[str, Any]:
    """SummaryRow's fields, as the record's row carries them: one definition of the seed's columns."""
    hints = get_type_hints(SummaryRow)
    return {f.name: (hints[f.name], ... if f.default is MISSING else f.default) for f in fields(SummaryRow)}


# A summary row (harness.report.summary.SummaryRow.to_dict) with the check that made it.
Row = create_model(
    "Row",
    __base__=_Entry,
    **_summary_row_fields(),
    kind=(Literal["rung", "smoke", "ab-baseline", "ab-candidate"], ...),
    replicates=(int, 1),
    test=(TestRef | None, None),
)


class Margin(BaseModel):
    """harness.judge.margin.Margin.as_dict: the answer's distance from its boundary in standard errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)
    se_units: float | None = None
    estimate: float | None = None
    boundary: float | None = None
    se: float | None = None
    answer: str | None = None
    sample: dict[str, Any] = Field(default_factory=dict)
    # Standard errors the decision needs past the boundary (harness.judge.margin); absent from records
    # written before 2026-12-03, whose margins were measured from the boundary itself.
    critical: float | None = None

    @model_serializer(mode="wrap")
    def _keep_old_records_shape(self, handler):
        data = handler(self)
        if data.get("critical") is None:
            data.pop("critical", None)  # a record without it is written back as it was read
        return data


class Rung(_Entry):
    """One rung's judgement (harness.judge.ladder.RungJudgement) and its summary row's interval."""

    stage: str
    rung: str
    title: str
    parent: str | None
    mode: str | None
    run_id: str
    mean: float | None
    ci: tuple[float, float] | None
    parent_mean: float | None
    delta: float | None
    delta_ci: tuple[float, float] | None  # at the Holm-adjusted level of the stage's family
    confidence: float | None
    decision: dict[str, Any] | None
    decided_class: str | None
    ruled_out: dict[str, Any] = Field(default_factory=dict)  # classes the evidence rules out, with the evidence
    expected_class: list[str | None]
    expected_ruled_out: list[str] = Field(default_factory=list)
    observed_direction: str | None
    expected_direction: str | None
    reasons: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    replicates: int = 1
    paired_delta: dict[str, Any] | None = None  # harness.judge.paired, or why not checked
    margin: Margin | None = None
    replicate_means: dict[str, Any] = Field(default_factory=dict)
    test: TestRef


class AbAnswer(_Entry):
    key: str  # harness.judge.ab.QUESTIONS, "mode-consistency", "contract", "candidate-executed", "<name>:..."
    question: str
    passed: bool
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    baseline_run: str
    candidate_run: str
    mode: str | None
    test: TestRef


class _Carried(BaseModel):
    """A part another module writes (harness.records.environment): keys it adds later still load,
    and it is written back with exactly the keys it was read or built with (no defaults added)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=True)

    @model_serializer(mode="wrap")
    def _as_given(self, handler):
        data = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {key: value for key, value in data.items() if key in given}


class HarnessCommit(_Carried):
    commit: str | None = None  # harness.records.commit
    dirty: bool | None = None


class Vime(_Carried):
    root: str | None = None
    commit: str | None = None
    note: str | None = None  # why there is no commit


class Container(_Carried):
    image: str | None = None
    source: str | None = None
    note: str | None = None  # why there is no image


class Cpu(_Carried):
    model: str | None = None
    cores: int | None = None
    memory_gib: float | None = None
    machine: str | None = None
    isa: str | None = None
    isa_settings: dict[str, str] = Field(default_factory=dict)


class Gpus(_Carried):
    count: int | None = 0
    models: list[str] | None = None
    note: str | None = None  # why none were seen


class Hardware(_Carried):
    gpus: Gpus | None = None
    cpu: Cpu | None = None
    nodes: dict[str, Any] | None = None


class Package(_Carried):
    package: str | None = None
    version: str | None = None


class Environment(_Entry):
    """The run's environment record (harness.records.environment, carried as written) and its argv."""

    label: str
    run_id: str
    run_dir: str
    stage: str | None
    rung: str | None
    mode: str | None
    backend: str | None
    spec_hash: str | None
    harness: HarnessCommit | None = None
    vime: Vime | None = None
    container: Container | None = None
    hardware: Hardware | None = None
    versions: dict[str, Package | str | None] | None = None  # role -> package and version; python: a version string
    os: dict[str, Any] | None = None
    argv: list[str] = Field(default_factory=list)
    recorded: bool


class WorstTokens(_Entry):
    run_id: str
    rung: str | None
    rows: list[dict[str, Any]]  # the token audit's rows (harness.attribution.audit), columns as it writes them


class DriftBudget(_Entry):
    """One rung's drift budget by intervention (harness.judge.budget.RungBudget.as_dict in `data`)."""

    rung: str
    verdict: str  # localised | not localised | inconclusive | not measured
    boundary: str | None = None  # the lever the drift is localised to
    reason: str
    data: dict[str, Any] = Field(default_factory=dict)  # shares per lever with intervals; empty when not measured
    test: TestRef


class Readiness(_Entry):
    """One of the seed's readiness criteria (harness.judge.readiness): its verdict and its numbers."""

    id: str
    seed_text: str
    verdict: str  # met | not met | not checked
    expected: str  # met | not met | reported (knobs/readiness.yaml)
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    target: str  # the make target whose session decided it
    test: TestRef


class CandidatePair(_Entry):
    """One A/B pair of the candidate operator or its negative control (harness.experiment.candidate_ab)."""

    name: str
    label: str  # the gate's words for it (harness.judge.candidate_gate.gate_label)
    data: dict[str, Any] = Field(default_factory=dict)  # PairAnswer.as_dict(): runs, contract, drift, reward, performance
    target: str
    test: TestRef


# What an answer answers: the kinds of check the main job and make candidate decide.
AnswerKind = Literal["ladder", "acceptance", "ab", "budget", "readiness", "candidate"]


class Answer(_Entry):
    """One judged answer with its margin (harness.report.answers)."""

    key: str
    kind: AnswerKind
    expected: str | None  # None: an answer without a statistic (a record check)
    observed: str
    margin: Margin | None = None
    note: str = ""
    test: TestRef
    # The named report (knobs/reports.yaml) this answer left the main job's answers for; None: one of
    # them (absent from records written before named reports, and written back so).
    report: str | None = None

    @model_serializer(mode="wrap")
    def _keep_old_records_shape(self, handler):
        data = handler(self)
        if data.get("report") is None:
            data.pop("report", None)
        return data


class Options(_Carried):
    """The front end's options: pytest's mode and backend, or every option of `python -m harness judge`."""

    mode: str | None = None
    backend: str | None = None


class Session(_Entry):
    argv: list[str]
    options: Options = Field(default_factory=Options)


class ExperimentRecord(_Entry):
    # "schema" would shadow BaseModel.schema: the attribute is schema_, the key on disk "schema".
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True, populate_by_name=True)
    schema_: Literal[1] = Field(SCHEMA, alias="schema")
    created: str
    session: Session
    rows: list[Row] = Field(default_factory=list)
    rungs: list[Rung] = Field(default_factory=list)
    ab: list[AbAnswer] = Field(default_factory=list)
    environment: list[Environment] = Field(default_factory=list)
    worst_tokens: WorstTokens | None = None
    outcomes: dict[str, str] = Field(default_factory=dict)  # test node id -> passed / failed / skipped / not reported
    answers: list[Answer] = Field(default_factory=list)
    budgets: list[DriftBudget] = Field(default_factory=list)
    readiness: list[Readiness] = Field(default_factory=list)
    candidate: list[CandidatePair] = Field(default_factory=list)
    min_margin_se: float | None = None
    # The pre-registration the session judged against (harness.judge.preregistration): the hash of every
    # expectation and threshold it applied, and what that hash covers, recorded before any answer.
    preregistration: dict[str, Any] | None = None
    _path: str | None = PrivateAttr(default=None)  # the file it was loaded from

    @property
    def path(self) -> str | None:
        return self._path

    def answer(self, key: str) -> AbAnswer | None:
        return next((a for a in self.ab if a.key == key), None)

    def outcome(self, test: TestRef | None) -> str | None:
        return self.outcomes.get(test.nodeid) if test is not None else None

    def to_data(self) -> dict:
        """The JSON object on disk (keys as always written; NaN kept, as json.dumps writes it; a record
        written before pre-registration hashes is written back without one)."""
        data = self.model_dump(by_alias=True)
        if data.get("preregistration") is None:
            data.pop("preregistration", None)
        # Nor is one without drift budgets, readiness criteria or candidate pairs given those keys.
        for key in ("budgets", "readiness", "candidate"):
            if not data.get(key):
                data.pop(key, None)
        return data


ENTRY_MODELS: dict[str, type[BaseModel]] = {
    "rows": Row,
    "rungs": Rung,
    "ab": AbAnswer,
    "environment": Environment,
    "worst_tokens": WorstTokens,
    "answers": Answer,
    "budgets": DriftBudget,
    "readiness": Readiness,
    "candidate": CandidatePair,
}
