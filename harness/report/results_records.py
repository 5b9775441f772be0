"""The committed records docs/results.md is generated from: one small JSON file per job, under
reports/records/, condensed from what the job wrote (git keeps each file's history).

    reports/records/main-job.json    `make baseline` (or `python -m harness baseline`): every judged
                                     answer with its margin, each rung's mean over its seeds, the
                                     tests' outcomes and how long they took, commit, machine, date
    reports/records/make-test.json   `make test`: the same condensation of its own record (its
                                     selftest record), read for its timing
    reports/records/make-candidate.json  `make candidate`: the candidate operator's A/B (its pairs,
                                     the negative control, the mixed-paths question), which does not
                                     fit the main job's time
    reports/records/seed-sweep.json  python -m harness sweep's sweep.json: per expected answer, the
                                     offsets that held it and its smallest margin

`python -m harness results --add PATH` writes one of them (add_record); the page reads them through
load_committed, which says the first problem of a bad file in one line naming the file and the key.
Only what a job measured goes in: a figure no job wrote has no record, and the page says so.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import REPO_ROOT
from harness.report.experiment_record import RecordError, load_record, validation_problem
from harness.report.record_model import AnswerKind, ExperimentRecord, Margin

RECORDS_DIR = REPO_ROOT / "reports" / "records"
SCHEMA = 1
JOB_FILES = {"main-job": "main-job.json", "make-test": "make-test.json", "make-candidate": "make-candidate.json"}
SWEEP_FILE = "seed-sweep.json"
# Where a session writes its Allure results beside its record: <summary dir>/experiment/experiment.json
# and <summary dir>/allure-results (make baseline: reports/, make test: reports/selftest/).
ALLURE_FOLDER = "allure-results"


class ResultsRecordError(Exception):
    """A record that cannot be read or written, in one line: the file, the key, what was expected."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Machine(_Record):
    """What ran the job, from the runs' own environment records (harness.records.environment)."""

    cpu: str | None = None
    cores: int | None = None
    isa: str | None = None  # harness.records.environment.isa_text: `AVX-512`, `AVX2, under ATEN_CPU_CAPABILITY=avx2`
    gpus: list[str] = Field(default_factory=list)

    def text(self) -> str:
        parts = [f"{self.cores} cores" if self.cores else None, self.cpu, self.isa]
        cpu = ", ".join(p for p in parts if p) or "CPU not recorded"
        return f"{cpu}; {', '.join(self.gpus)}" if self.gpus else f"{cpu}, no GPU"


class Provenance(_Record):
    made: str  # when the job's record was written (ISO 8601, UTC)
    commits: list[str] = Field(default_factory=list)  # the harness commit(s) the runs recorded, `abc1234` or `abc1234 (dirty)`
    session_commit: str | None = None  # the commit Allure's environment.properties names at the session's end
    machine: Machine = Field(default_factory=Machine)
    backend: str | None = None
    mode: str | None = None

    @property
    def date(self) -> str:
        return self.made[:10]


class Tests(_Record):
    counts: dict[str, int]  # status -> tests (or checks, when counted from the record)
    # Where the counts come from: a pytest session's Allure results (every test), or, for a front end
    # that writes none (`python -m harness baseline`), the record's own outcomes (every check).
    counted_from: Literal["allure results", "the record's checks"] = "allure results"
    test_seconds: float | None = None  # first test's start to the last one's stop (Allure results)
    wall_seconds: float | None = None  # the whole command as its caller timed it (--wall), setup included

    def counts_text(self) -> str:
        order = ("passed", "failed", "broken", "skipped", "unknown", "not reported")
        text = ", ".join(f"{self.counts[s]} {s}" for s in order if self.counts.get(s)) or "0 tests"
        return text if self.counted_from == "allure results" else f"{text} (checks)"


class SeedMean(_Record):
    seed: int | None
    mean: float | None


class RungFigure(_Record):
    stage: str
    rung: str
    parent: str | None
    mean: float | None  # abs-diff after the warm-up, the mean of the seeds' means
    parent_mean: float | None
    delta: float | None
    delta_ci: tuple[float, float] | None  # at the Holm-adjusted level below
    confidence: float | None
    observed: str | None  # up / down / flat / inconclusive
    expected: str | None
    decided_class: str | None
    expected_class: list[str | None]
    margin_se: float | None
    seeds: dict[str, list[SeedMean]] = Field(default_factory=dict)  # rung -> its seeds' means, the parent's too
    outcome: str  # the test's: passed / failed / skipped / not reported


class AnswerFigure(_Record):
    key: str
    kind: AnswerKind
    expected: str | None
    observed: str
    margin_se: float | None  # None: not measured (no statistic, or the estimate had no SE)
    sample: dict[str, Any] = Field(default_factory=dict)
    note: str = ""
    outcome: str
    report: str | None = None  # the named report it left the main job's answers for (knobs/reports.yaml); None: one of them


class JobRecord(_Record):
    """One job's condensed experiment record (main-job.json, make-test.json, make-candidate.json)."""

    schema_: Literal[1] = Field(SCHEMA, alias="schema")
    kind: Literal["main-job", "make-test", "make-candidate"]
    source: str  # the experiment record it was condensed from, as given to --add
    provenance: Provenance
    tests: Tests | None = None
    note: str = ""  # the caller's words on the conditions (--note), e.g. other jobs on the machine
    flag_below_se: float | None = None  # thresholds.min_margin_se as the job applied it
    # the pre-registration the job judged against (harness.judge.preregistration); None: a record condensed
    # before it was kept here (the job's experiment record and page carry it either way)
    expectations_sha256: str | None = None
    rungs: list[RungFigure] = Field(default_factory=list)
    answers: list[AnswerFigure] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SweepRow(_Record):
    key: str
    expected: str | None
    held: int
    seeds: int
    min_margin: float | None
    missed: list[str] = Field(default_factory=list)


class SweepRecord(_Record):
    """python -m harness sweep's sweep.json, as committed."""

    schema_: Literal[1] = Field(SCHEMA, alias="schema")
    kind: Literal["seed-sweep"] = "seed-sweep"
    source: str
    created: str  # when the last offset's record was written (ISO 8601, UTC)
    offsets: list[int]
    commits: list[str]
    machines: list[str]
    rows: list[SweepRow]
    problems: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)  # offset -> its wall time, when the sweep ran it
    # The pre-registration the offsets were judged against (harness.judge.preregistration); None before hashing.
    expectations_sha256: str | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def date(self) -> str:
        return self.created[:10]


def _finite(value: float | None) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _margin_se(margin: Margin | None) -> float | None:
    return _finite(margin.se_units) if margin is not None else None


def problem_line(path: str | Path, err: ValidationError) -> str:
    """`file: key 'rungs[2].mean': expected ...; got str 'x'`, the first problem of a ValidationError."""
    return f"{path}: {validation_problem(err)}"


def read_json(path: Path, shown: str | None = None) -> dict:
    """A JSON object from path, or ResultsRecordError naming the file."""
    name = shown or str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsRecordError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultsRecordError(f"{name}: not readable JSON ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict):
        raise ResultsRecordError(f"{name}: expected a JSON object, got {type(data).__name__}")
    return data


def load_committed(path: Path, model: type[BaseModel], shown: str | None = None) -> BaseModel:
    """A committed record as `model`; its first problem as one ResultsRecordError line."""
    data = read_json(path, shown)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ResultsRecordError(problem_line(shown or path, err)) from None


def parse_duration(text: str) -> float:
    """`17m37s`, `1h2m`, `1057s`, `1057` (seconds) -> seconds."""
    value = text.strip().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", value)
    if not value or not match or not any(match.groups()):
        raise ResultsRecordError(f"--wall {text!r}: expected a duration such as 17m37s, 1h2m or 1057 (seconds)")
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def tests_from_allure(results: Path) -> tuple[dict[str, int], float | None]:
    """Test counts by status and the span from the first test's start to the last one's stop."""
    files = sorted(results.glob("*-result.json")) if results.is_dir() else []
    if not files:
        raise ResultsRecordError(f"{results}: no *-result.json files, expected the folder a `pytest --alluredir` session wrote")
    counts: dict[str, int] = {}
    starts, stops = [], []
    for path in files:
        result = read_json(path)
        status = str(result.get("status") or "unknown")
        counts[status] = counts.get(status, 0) + 1
        if isinstance(result.get("start"), int | float) and isinstance(result.get("stop"), int | float):
            starts.append(result["start"])
            stops.append(result["stop"])
    return dict(sorted(counts.items())), ((max(stops) - min(starts)) / 1000 if starts else None)


def session_commit(results: Path) -> str | None:
    """The `harness.commit` line Allure's environment.properties carries (harness.report.envprops)."""
    props = results / "environment.properties"
    if not props.is_file():
        return None
    for line in props.read_text(encoding="utf-8").splitlines():
        if line.startswith("harness.commit="):
            value = line.split("=", 1)[1].strip()
            commit, _, rest = value.partition(" ")
            return commit[:7] + (f" {rest}" if rest else "")
    return None


def provenance(record: ExperimentRecord, results: Path | None) -> Provenance:
    from harness.records.environment import isa_text

    commits, machine = [], Machine()
    for env in record.environment:
        if env.harness is not None and env.harness.commit:
            commits.append(env.harness.commit[:7] + (" (dirty)" if env.harness.dirty else ""))
        hardware = env.hardware
        if machine.cpu is None and hardware is not None and hardware.cpu is not None and hardware.cpu.model:
            gpus = list((hardware.gpus.models if hardware.gpus else None) or [])
            cpu = hardware.cpu
            machine = Machine(cpu=cpu.model, cores=cpu.cores, isa=isa_text(cpu.model_dump()), gpus=gpus)
    options = record.session.options
    return Provenance(
        made=record.created,
        commits=sorted(set(commits)),
        session_commit=session_commit(results) if results is not None else None,
        machine=machine,
        backend=options.backend,
        mode=options.mode,
    )


def _seed_means(replicate_means: dict) -> dict[str, list[SeedMean]]:
    """experiment.json's {rung: {run_id: {seed, mean}}} as {rung: [seed means, by seed]}."""
    out = {}
    for rung, runs in replicate_means.items():
        if isinstance(runs, dict):
            means = [SeedMean(seed=v.get("seed"), mean=_finite(v.get("mean"))) for v in runs.values() if isinstance(v, dict)]
            out[rung] = sorted(means, key=lambda m: (m.seed is None, m.seed or 0))
    return out


def condense(record: ExperimentRecord, kind: str, source: str, tests: Tests | None, results: Path | None, note: str = "") -> JobRecord:
    """What the page shows of a job's experiment record: answers, margins, rung means, provenance."""
    rungs = [
        RungFigure(
            stage=r.stage,
            rung=r.rung,
            parent=r.parent,
            mean=_finite(r.mean),
            parent_mean=_finite(r.parent_mean),
            delta=_finite(r.delta),
            delta_ci=r.delta_ci,
            confidence=r.confidence,
            observed=r.observed_direction,
            expected=r.expected_direction,
            decided_class=r.decided_class,
            expected_class=list(r.expected_class),
            margin_se=_margin_se(r.margin),
            seeds=_seed_means(r.replicate_means),
            outcome=record.outcome(r.test) or "not reported",
        )
        for r in record.rungs
    ]
    answers = [
        AnswerFigure(
            key=a.key,
            kind=a.kind,
            expected=a.expected,
            observed=a.observed,
            margin_se=_margin_se(a.margin),
            sample={k: v for k, v in (a.margin.sample if a.margin else {}).items() if k != "measured_for"},
            note=a.note,
            outcome=record.outcome(a.test) or "not reported",
            report=a.report,
        )
        for a in record.answers
    ]
    return JobRecord(
        kind=kind,
        source=source,
        provenance=provenance(record, results),
        tests=tests,
        note=note,
        flag_below_se=record.min_margin_se,
        expectations_sha256=(record.preregistration or {}).get("sha256"),
        rungs=rungs,
        answers=answers,
    )


def condense_sweep(data: dict, source: str) -> SweepRecord:
    try:
        return SweepRecord.model_validate({"source": source, **data})
    except ValidationError as err:
        raise ResultsRecordError(problem_line(source, err)) from None


def write_record(model: BaseModel, path: Path) -> Path:
    from harness.records.atomic import atomic_write_text

    atomic_write_text(path, json.dumps(model.model_dump(by_alias=True), indent=1) + "\n")
    return path


def as_in_its_checkout(source: Path) -> str:
    """The record's path as its own checkout names it (relative to the nearest folder above it holding
    .git): a job run in a fresh clone elsewhere is committed without that machine's path."""
    resolved = source.resolve()
    for folder in resolved.parents:
        if (folder / ".git").exists():
            return str(resolved.relative_to(folder))
    return str(source)


def add_record(
    source: Path, records_dir: Path = RECORDS_DIR, *, job: str = "main-job", wall: str | None = None, allure: Path | None = None, note: str = ""
) -> Path:
    """Condense a finished job's record into records_dir: an experiment record (experiment.json, or
    the folder holding it) becomes main-job.json, make-test.json or make-candidate.json (`job`), with the tests' counts
    and durations from the Allure results beside it (a record with none beside it, as `python -m
    harness baseline` writes, counts its own checks); a seed sweep's sweep.json becomes seed-sweep.json."""
    source = Path(source)
    shown = as_in_its_checkout(source)
    if source.is_file() and source.name != "experiment.json":
        data = read_json(source)
        if "offsets" in data:  # python -m harness sweep's sweep.json
            return write_record(condense_sweep(data, shown), records_dir / SWEEP_FILE)
    if job not in JOB_FILES:
        raise ResultsRecordError(f"--job {job!r}: expected one of {', '.join(JOB_FILES)}")
    try:
        record = load_record(source)
    except RecordError as err:
        raise ResultsRecordError(str(err)) from None
    record_file = Path(record.path)
    results = allure if allure is not None else record_file.parent.parent / ALLURE_FOLDER
    wall_seconds = parse_duration(wall) if wall else None
    if results.is_dir():
        counts, seconds = tests_from_allure(results)
        tests = Tests(counts=counts, test_seconds=seconds, wall_seconds=wall_seconds)
    elif allure is not None:
        raise ResultsRecordError(f"--allure-results {allure}: no such folder")
    else:
        counts: dict[str, int] = {}
        for outcome in record.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        tests = Tests(counts=dict(sorted(counts.items())), counted_from="the record's checks", wall_seconds=wall_seconds)
    return write_record(condense(record, job, shown, tests, results if results.is_dir() else None, note), records_dir / JOB_FILES[job])
