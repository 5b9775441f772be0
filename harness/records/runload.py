"""Read a run directory back into a `Run`, keeping whatever is readable.

Each file is read on its own; a missing or corrupt file becomes one line in `Run.problems`
naming the file and what was expected, and the rest of the run still loads. metrics.jsonl
tolerates a torn last line (a run killed mid-write); when metrics.jsonl is missing, the records
are re-parsed from log.txt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.records.merge import merge_records, metric_names, metric_series
from harness.records.models import Failure, Record
from harness.records.recorded_spec import RecordedSpec, recorded_spec


class RunStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    state: Literal["running", "finished", "failed", "interrupted", "unfinished"]
    failure: Failure | None = None
    started: str | None = None
    ended: str | None = None
    steps_logged: int = 0
    exit_code: int | None = None


class Run(BaseModel):
    id: str
    path: Path
    spec: RecordedSpec = Field(default_factory=RecordedSpec)  # typed once here; never read as a dict
    argv: list[str] | None = None
    environment: dict | None = None
    status: RunStatus | None = None
    records: list[Record] = Field(default_factory=list)
    embedded_record: dict | None = None
    ingest: dict | None = None
    dumps: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    def series(self, name: str) -> list[tuple[int, float | int]]:
        """[(step, value)] for a metric such as train/train_rollout_logprob_abs_diff,
        rollout/raw_reward or perf/step_time; records with the same n are merged (merge.py)."""
        return metric_series(self.records, name)

    def steps(self) -> list[int]:
        return sorted({r.n for r in self.records if r.kind == "step"})

    def metric_names(self) -> list[str]:
        return metric_names(self.records)

    def conflicts(self) -> list[str]:
        return merge_records(self.records)[1]


def _describe(err: Exception) -> str:
    return " ".join(str(err).split())[:300]


def read_yaml_mapping(path: Path) -> tuple[dict | None, str | None]:
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name}: missing"
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        return None, f"{path.name}: not readable YAML ({_describe(err)})"
    if not isinstance(value, dict):
        return None, f"{path.name}: expected a mapping, found {type(value).__name__}"
    return value, None


def read_json(path: Path, expected: type) -> tuple[object | None, str | None]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{path.name}: missing"
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, f"{path.name}: not valid JSON ({_describe(err)})"
    if not isinstance(value, expected):
        return None, f"{path.name}: expected a JSON {expected.__name__}, found {type(value).__name__}"
    return value, None


def read_metrics(path: Path) -> tuple[list[Record], str | None]:
    """Records from metrics.jsonl; one message for everything wrong with the file (or None)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], f"{path.name}: missing"
    except OSError as err:
        return [], f"{path.name}: not readable ({_describe(err)})"
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    torn_tail = not text.endswith("\n") and lines[-1] != ""
    if lines and lines[-1] == "":
        lines.pop()
    records: list[Record] = []
    bad: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            records.append(Record(kind=raw["kind"], n=raw["n"], metrics=raw["metrics"], line=number))
        except (ValueError, TypeError, KeyError, ValidationError) as err:
            if torn_tail and number == len(lines):
                bad.append(f"line {number} is torn (the run was killed while writing it)")
            else:
                bad.append(f"line {number} is not a {{kind, n, metrics}} record ({_describe(err)[:120]})")
    if not bad:
        return records, None
    more = f" (and {len(bad) - 1} more bad lines)" if len(bad) > 1 else ""
    return records, f"{path.name}: {bad[0]}{more}; kept {len(records)} records"


def load_run(run_dir) -> Run:
    from harness.records.logparse import LogFileError, parse_log_file

    path = run_dir.path
    if not path.is_dir():
        return Run(id=path.name, path=path, problems=[f"{path}: no such run directory"])
    problems: list[str] = []

    def keep(value_and_problem):
        value, problem = value_and_problem
        if problem:
            problems.append(problem)
        return value

    ingest = read_json(run_dir.file(run_dir.INGEST), dict)[0] if run_dir.file(run_dir.INGEST).exists() else None
    launched = ingest is None  # ingested directories have no spec, argv or environment of their own
    spec = keep(read_yaml_mapping(run_dir.file(run_dir.SPEC))) if launched or run_dir.file(run_dir.SPEC).exists() else None
    argv = keep(read_json(run_dir.file(run_dir.ARGV), list)) if launched or run_dir.file(run_dir.ARGV).exists() else None
    environment = keep(read_json(run_dir.file(run_dir.ENVIRONMENT), dict)) if launched or run_dir.file(run_dir.ENVIRONMENT).exists() else None

    status = None
    raw_status = keep(read_json(run_dir.file(run_dir.STATUS), dict))
    if raw_status is not None:
        try:
            status = RunStatus(**raw_status)
        except ValidationError as err:
            first = err.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            problems.append(f"{run_dir.STATUS}: key {key!r}: {first['msg']} (found {first.get('input')!r})")

    records, metrics_problem = read_metrics(run_dir.file(run_dir.METRICS))
    log_path = run_dir.file(run_dir.LOG)
    if metrics_problem and metrics_problem.endswith(": missing") and log_path.exists():
        try:
            records = parse_log_file(log_path).records
            problems.append(f"{run_dir.METRICS}: missing; {len(records)} records re-parsed from {run_dir.LOG}")
        except LogFileError as err:
            problems.append(f"{run_dir.METRICS}: missing, and {run_dir.LOG} is unusable ({err})")
    elif metrics_problem:
        problems.append(metrics_problem)

    embedded = None
    if run_dir.file(run_dir.EMBEDDED).exists():
        embedded = keep(read_json(run_dir.file(run_dir.EMBEDDED), dict))
    dumps = sorted(str(p.relative_to(run_dir.dumps_dir)) for p in run_dir.dumps_dir.rglob("*") if p.is_file()) if run_dir.dumps_dir.is_dir() else []
    spec, spec_problems = recorded_spec(spec, argv)
    problems.extend(spec_problems)
    return Run(
        id=path.name,
        path=path,
        spec=spec,
        argv=argv,
        environment=environment,
        status=status,
        records=records,
        embedded_record=embedded,
        ingest=ingest,
        dumps=dumps,
        problems=problems,
    )
