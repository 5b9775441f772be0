"""The run directory `reports/runs/<run-id>/`, the unit of record.

    spec.yaml             resolved spec (written by the launcher: write_spec)
    argv.json             the trainer's argv, a JSON list
    environment.json      commit, image, hardware, library versions, env vars (redacted)
    log.txt               raw combined output, appended line by line as it streams
    metrics.jsonl         one {"kind", "n", "metrics"} object per logged record, appended and flushed
    dumps/                token dumps (--save-debug-* files)
    status.json           {"state", "failure", "started", "ended", "steps_logged", "exit_code"[, "note"]}
    trainer.json          the launched trainer's pid and start time (or Ray job id), so a later launch
                          can tell whether it still runs before it deletes this directory
    embedded_record.json  written by the embedded trainer; only read here
    ingest.json           present when the directory was made by `harness ingest`

Whole files are replaced atomically (temp file + os.replace). The two streams (log.txt,
metrics.jsonl) are appended and flushed per line, so a killed run keeps every line it printed;
the reader tolerates a torn last line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import yaml

from harness.records.atomic import atomic_write_json, atomic_write_text, to_json
from harness.records.models import Failure, Record
from harness.records.redact import REDACTED, redact_argv, redact_flags, redact_text, secret_values

# unfinished: the record stops without the trainer's own end (an ingested log of a killed run);
# interrupted: the harness stopped the trainer (a signal, Ctrl-C or its time limit).
RUN_STATES = ("running", "finished", "failed", "interrupted", "unfinished")


def written_by_harness(path: Path) -> bool:
    """Whether `path` is a run directory this tool wrote: its status.json names a run state.
    Writers replace only such directories; anything else may hold a user's files."""
    try:
        status = json.loads((Path(path) / RunDir.STATUS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(status, dict) and status.get("state") in RUN_STATES


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunDir:
    SPEC = "spec.yaml"
    ARGV = "argv.json"
    ENVIRONMENT = "environment.json"
    LOG = "log.txt"
    METRICS = "metrics.jsonl"
    STATUS = "status.json"
    EMBEDDED = "embedded_record.json"
    INGEST = "ingest.json"
    DUMPS = "dumps"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._log = None
        self._metrics = None
        self._secrets: set[str] = set()

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def dumps_dir(self) -> Path:
        return self.path / self.DUMPS

    def file(self, name: str) -> Path:
        return self.path / name

    def create(self) -> RunDir:
        self.dumps_dir.mkdir(parents=True, exist_ok=True)
        return self

    # --- whole files, replaced atomically
    # Every writer redacts secrets (redact.py); the values seen here are also hidden in log.txt.
    def write_spec(self, spec: dict) -> None:
        spec = dict(spec)
        for section in ("flags", "overrides"):
            if isinstance(spec.get(section), dict):
                self._secrets |= secret_values(spec[section])
                spec[section] = redact_flags(spec[section])
        atomic_write_text(self.file(self.SPEC), yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))

    def write_argv(self, argv: list[str]) -> None:
        argv = [str(arg) for arg in argv]
        redacted = redact_argv(argv)
        self._secrets |= {value for value, shown in zip(argv, redacted) if shown == REDACTED}
        atomic_write_json(self.file(self.ARGV), redacted)

    def write_environment(self, environment: dict) -> None:
        atomic_write_json(self.file(self.ENVIRONMENT), environment)

    def record_tracking(self, tracking: dict) -> None:
        """Add the run's W&B run and TensorBoard directory (environment.tracking_record) to
        environment.json, known only once the trainer has started them."""
        if not tracking:
            return
        try:
            environment = json.loads(self.file(self.ENVIRONMENT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            environment = {}
        self.write_environment({**(environment if isinstance(environment, dict) else {}), **tracking})

    def record_nodes(self, probed: list[dict], where: str) -> None:
        """Replace this machine's hardware, versions and variables in environment.json by those of
        the nodes that ran the job (environment.cluster_environment)."""
        from harness.records.environment import cluster_environment

        if not probed:
            return
        try:
            environment = json.loads(self.file(self.ENVIRONMENT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            environment = {}
        self.write_environment(cluster_environment(environment if isinstance(environment, dict) else {}, probed, where))

    def write_ingest_info(self, info: dict) -> None:
        atomic_write_json(self.file(self.INGEST), info)

    def set_status(
        self,
        state: str,
        *,
        failure: Failure | dict | None = None,
        exit_code: int | None = None,
        steps_logged: int | None = None,
        started: str | None = None,
        ended: str | None = None,
        note: str | None = None,
    ) -> dict:
        """Replace status.json. `started` is kept from the previous status (or set now); `ended` is
        set for every state but running; `steps_logged` defaults to the step records on disk.
        `started`/`ended` override the clock (ingest uses the log's own first and last timestamps);
        `note` says in words why a run is unfinished or interrupted."""
        if state not in RUN_STATES:
            raise ValueError(f"status state {state!r}: expected one of {', '.join(RUN_STATES)}")
        previous = self.read_status()
        if isinstance(failure, Failure):
            failure = failure.model_dump()
        if failure and isinstance(failure.get("text"), str):
            failure = {**failure, "text": redact_text(failure["text"], self._secrets)}  # a log line, as log.txt has it
        status = {
            "state": state,
            "failure": failure,
            "started": started or previous.get("started") or utc_now(),
            "ended": None if state == "running" else (ended or utc_now()),
            "steps_logged": steps_logged if steps_logged is not None else self._count_steps_on_disk(),
            "exit_code": exit_code,
        }
        if note:
            status["note"] = note
        atomic_write_json(self.file(self.STATUS), status)
        return status

    # --- streams, appended and flushed line by line
    def append_log(self, line: str) -> None:
        if self._log is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._log = self.file(self.LOG).open("a", encoding="utf-8")
        line = redact_text(line, self._secrets)
        self._log.write(line if line.endswith("\n") else line + "\n")
        self._log.flush()

    def append_record(self, record: Record | dict) -> None:
        data = record.to_json_dict() if isinstance(record, Record) else Record(**record).to_json_dict()
        if self._metrics is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._metrics = self.file(self.METRICS).open("a", encoding="utf-8")
        # One write per record: a kill can tear at most the last line, which the reader drops.
        self._metrics.write(to_json(data, indent=None) + "\n")
        self._metrics.flush()

    def close(self) -> None:
        for handle in (self._log, self._metrics):
            if handle is not None:
                handle.close()
        self._log = self._metrics = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- reading
    def load(self):
        """The whole run as a `Run`; each missing or corrupt file becomes one line in Run.problems."""
        from harness.records.runload import load_run

        return load_run(self)

    def read_status(self) -> dict:
        """status.json as a dict; {} when it is missing or unreadable (the loader reports why)."""
        try:
            value = json.loads(self.file(self.STATUS).read_text(encoding="utf-8"))
            return value if isinstance(value, dict) else {}
        except (OSError, ValueError):
            return {}

    def _count_steps_on_disk(self) -> int:
        from harness.records.runload import read_metrics

        records, _ = read_metrics(self.file(self.METRICS))
        return len({r.n for r in records if r.kind == "step"})
