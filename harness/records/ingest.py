"""`harness ingest`: turn what a VIME run left behind into records or a run directory.

Accepted inputs: a raw log file; a directory of them (and/or TensorBoard event files written with
`--use-tensorboard`, W&B offline runs written with `--use-wandb`, and/or `--save-debug-*` dumps);
an online W&B run by path (`wandb:entity/project/run_id` or its URL; wandb_run.py); an existing
run directory (re-read, e.g. to judge it). Bad input is reported as one line per problem in `IngestResult.problems`, every
readable record is kept, and a run directory is written completely or not at all (it is built
next to its destination and renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from harness.records.atomic import DIR_MODE
from harness.records.completion import Completion, Length, completion, length_from_arguments
from harness.records.debug_dumps import DumpError, dump_records, is_dump_file, load_dump
from harness.records.environment import checkpoint_record
from harness.records.failures import primary_failure
from harness.records.logparse import LogFileError, parse_log_file
from harness.records.merge import merge_records
from harness.records.models import Failure, Record
from harness.records.printed_arguments import flags_from_arguments
from harness.records.redact import redact_text
from harness.records.rundir import RunDir, utc_now, written_by_harness
from harness.records.tbevents import is_event_file, read_event_file
from harness.records.wandb_run import WandbRun, is_wandb_file, online_path, read_offline, read_online
from harness.spec.errors import SpecError
from harness.spec.flag_read import text_flag


class IngestResult(BaseModel):
    source: Path
    records: list[Record] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # bad input: `harness ingest` exits 2
    inputs: dict[str, list[str]] = Field(default_factory=lambda: {"logs": [], "events": [], "dumps": [], "wandb": []})
    tracking: dict = Field(default_factory=dict)  # the W&B run the records came from (path, id, project)
    stopped_at: int | None = None
    # How many rollouts the run was launched with (its argument print, the user's --num-rollout,
    # or a run directory's spec) and how far its records go (completion.py).
    length: Length | None = None
    completion: Completion | None = None
    recorded_state: str | None = None  # the state a re-read run directory recorded
    # The driver's argument print (name -> value text), the run's resolved flags as they ran.
    arguments: dict[str, str] = Field(default_factory=dict)
    note: str | None = None  # why the run is unfinished, in words (status.json "note")
    run_dir: Path | None = None
    logged_span: tuple[str | None, str | None] = (None, None)  # first and last log timestamps

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def num_rollout(self) -> int | None:
        return self.length.num_rollout if self.length else None

    def state(self) -> str:
        """Finished only on evidence: records that cover every rollout the run was launched with,
        or a run directory that says so (and whose records agree)."""
        if self.failures:
            return "failed"
        if self.recorded_state is not None:
            return self.recorded_state
        if self.stopped_at is not None:
            return "interrupted"
        return "finished" if self.completion is not None and self.completion.complete else "unfinished"


def is_run_directory(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in (RunDir.METRICS, RunDir.STATUS))


def _input_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))


def _is_text(path: Path) -> bool:
    with path.open("rb") as handle:
        head = handle.read(8192)
    return b"\x00" not in head


def ingest(
    path: Path | str, out: Path | None = None, *, trust_dumps: bool = False, labels: dict | None = None, num_rollout: int | None = None
) -> IngestResult:
    """Read `path`; with `out`, also write a run directory there (replacing one that exists).
    `num_rollout`: how many rollouts the run was launched with, where its log does not print it."""
    online = online_path(str(path))
    if online is not None:
        result = IngestResult(source=Path(f"wandb:{online}"))
        _take_wandb(read_online(online), result)
        _judge_length(result.source, result, num_rollout)
        if out is not None and (result.records or result.failures):
            result.run_dir = write_run_directory(result, Path(out), labels)
        return result
    path = Path(path)
    result = IngestResult(source=path)
    if not path.exists():
        result.problems.append(f"{path}: no such file or directory")
        return result
    if is_run_directory(path):
        _read_run_directory(path, result, num_rollout)
    else:
        _read_inputs(path, result, trust_dumps)
        _judge_length(path, result, num_rollout)
    if not result.records and not result.failures and not result.problems:
        result.problems.append(
            f"{path}: no step/rollout/perf/eval records and no failure signatures: expected VIME log text, TensorBoard events, "
            f"a W&B run or --save-debug-* dumps"
        )
    if out is not None and (result.records or result.failures):
        result.run_dir = write_run_directory(result, Path(out), labels)
    return result


def _judge_length(path: Path, result: IngestResult, given: int | None) -> None:
    """Complete or not, from the records against N: the log's own argument print, else the user's."""
    printed = result.length
    if given is not None:
        if printed is not None and printed.num_rollout != given:
            result.problems.append(
                f"{path}: --num-rollout {given}, but {printed.source}: the log was launched with another length; the log's own number is used"
            )
        elif printed is None:
            result.length = Length(given, "--num-rollout")
    result.completion = completion(result.records, result.length)
    if result.state() == "unfinished":
        result.note = result.completion.note


def _read_run_directory(path: Path, result: IngestResult, given: int | None = None) -> None:
    run = RunDir(path).load()
    result.records = run.records
    unfinished = "the copy is recorded as unfinished"
    for problem in run.problems:
        # No readable status: nothing shows the run ended, so the copy is unfinished (never
        # finished by default); the line that says why the status is unreadable says so too.
        said = f"; {unfinished}" if run.status is None and problem.startswith(RunDir.STATUS) else ""
        result.problems.append(f"{path}/{problem}{said}")
    if run.status and run.status.failure:
        result.failures.append(run.status.failure)
    if run.status is None or run.status.state == "running":
        result.recorded_state = "unfinished"
        result.note = f"{path}/{RunDir.STATUS} does not show the run ended"
        if run.status is not None:  # a launcher that died before writing its last status
            result.problems.append(f"{path}/{RunDir.STATUS}: still says running; {unfinished}")
    else:
        result.recorded_state = run.status.state
        result.note = getattr(run.status, "note", None)
    # A status that says finished is checked against the records: the run's spec (or the user)
    # says how many rollouts it was launched with.
    n = given if given is not None else run.spec.flag("num-rollout")
    if isinstance(n, int) and not isinstance(n, bool):
        source = "--num-rollout" if given is not None else f"{RunDir.SPEC} (num-rollout {n})"
        result.length = Length(n, source)
        result.completion = completion(result.records, result.length)
        if result.recorded_state == "finished" and not result.completion.complete:
            result.recorded_state = "unfinished"
            result.note = f"{RunDir.STATUS} says finished, but its records stop: {result.completion.note}"


def _read_inputs(path: Path, result: IngestResult, trust_dumps: bool) -> None:
    single = path.is_file()
    log_records: list[Record] = []
    event_records: list[Record] = []
    dump_files: list[Path] = []
    wandb_records: list[Record] = []
    for file in _input_files(path):
        if is_wandb_file(file):
            before = len(result.records)
            _take_wandb(read_offline(file), result)
            wandb_records += result.records[before:]
            del result.records[before:]
        elif _wandb_side_file(file):
            continue  # a W&B run's own logs and files: its records are in the .wandb file
        elif is_event_file(file):
            records, warnings = read_event_file(file)
            event_records.extend(records)
            result.warnings.extend(warnings)
            result.inputs["events"].append(str(file))
        elif is_dump_file(file):
            dump_files.append(file)  # loaded one at a time below: 10 M tokens of lists is a lot of memory
        elif single or _is_text(file):
            try:
                parsed = parse_log_file(file)
            except LogFileError as err:
                result.problems.append(str(err))
                continue
            if not single and not parsed.records and not parsed.failures:
                result.warnings.append(f"{file}: no VIME records or failures; not counted as a log")
                continue
            log_records.extend(parsed.records)
            result.failures.extend(parsed.failures)
            result.warnings.extend(f"{file}: {w}" for w in parsed.warnings if w not in parsed.bad_input)
            result.problems.extend(f"{file}: {w}" for w in parsed.bad_input)
            if parsed.stopped_at is not None:
                result.stopped_at = parsed.stopped_at
            if parsed.arguments and not result.arguments:
                result.arguments = dict(parsed.arguments)
            printed = length_from_arguments(parsed.arguments, parsed.argument_lines)
            if printed is not None and result.length is None:
                result.length = (
                    printed
                    if single
                    else Length(printed.num_rollout, f"{file.name}: {printed.source}", printed.start_rollout_id, printed.steps_per_rollout)
                )
            elif printed is not None and printed.num_rollout != result.length.num_rollout:
                result.problems.append(f"{file}: {printed.source}, but {result.length.source}: the logs are of runs of different lengths")
            if parsed.tracking:
                result.tracking.setdefault("printed", parsed.tracking)  # W&B's banner lines in the log
            result.logged_span = _widen(result.logged_span, parsed.first_timestamp, parsed.last_timestamp)
            result.inputs["logs"].append(str(file))
        else:
            result.warnings.append(f"{file}: binary file that is neither a TensorBoard event file nor a .pt dump; skipped")

    if len(result.inputs["logs"]) > 1:
        _, conflicts = merge_records(log_records)
        if conflicts:
            result.problems.append(f"{path}: the logs disagree ({conflicts[0]}; {len(conflicts)} conflicts): they look like more than one run")
    if log_records and event_records:
        result.warnings.append(
            f"{path}: both logs and TensorBoard events found; records taken from the logs (events store float32 and would conflict)"
        )
        event_records = []
    if wandb_records and log_records:
        result.warnings.append(f"{path}: both logs and a W&B run found; records taken from the logs")
        wandb_records = []
    elif wandb_records and event_records:
        # W&B keeps the logged float64 values; the events' float32 copies would conflict with them.
        result.warnings.append(f"{path}: both TensorBoard events and a W&B run found; records taken from the W&B run")
        event_records = []

    def loaded_dumps():
        for file in dump_files:
            try:
                data = load_dump(file, trust=trust_dumps)
            except DumpError as err:
                result.problems.append(str(err))
                continue
            result.inputs["dumps"].append(str(file))
            yield file, data

    dump_derived, dump_warnings, dump_problems = dump_records(loaded_dumps())
    result.warnings.extend(dump_warnings)
    result.problems.extend(dump_problems)
    result.records = log_records + event_records + wandb_records + dump_derived


_WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-\w+$")


def _wandb_side_file(file: Path) -> bool:
    """A file W&B writes beside its runs (debug logs, config, requirements): not a VIME log."""
    parts = file.parts
    return any(_WANDB_RUN_DIR.match(part) for part in parts[:-1]) or ("wandb" in parts[:-1] and file.name.startswith("debug"))


def _take_wandb(run: WandbRun, result: IngestResult) -> None:
    """A W&B run's records, problems and length (its config's num_rollout) into the result."""
    result.records.extend(run.records)
    result.warnings.extend(run.warnings)
    result.problems.extend(run.problems)
    if run.problems and not run.records:
        return
    result.inputs["wandb"].append(run.source)
    result.tracking["wandb"] = {"path": run.path, "run_id": run.run_id, "project": run.project, "entity": run.entity, "source": run.source}
    n = run.num_rollout()
    if n is not None and result.length is None:
        result.length = Length(n, f"the W&B run's config (num_rollout {n})")
    if run.exit_code is None:
        result.warnings.append(f"{run.source}: the W&B run has no exit record (killed, or still running)")
    elif run.exit_code != 0:
        result.failures.append(Failure(signature="nonzero-exit", line=0, text=f"{run.source}: the W&B run exited with code {run.exit_code}"))


def _widen(span, first, last):
    firsts = [t for t in (span[0], first) if t]
    lasts = [t for t in (span[1], last) if t]
    return (min(firsts) if firsts else None, max(lasts) if lasts else None)


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for file in _input_files(path) if path.exists() else []:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def write_run_directory(result: IngestResult, out: Path, labels: dict | None = None) -> Path:
    out = out.resolve()
    if out.exists() and not (out.is_dir() and (written_by_harness(out) or not any(out.iterdir()))):
        raise SpecError(
            f"{out}: exists and is not a run directory written by this tool; refusing to replace it "
            f"(its files would be deleted): choose a new or empty directory"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    os.chmod(building, DIR_MODE)
    try:
        run_dir = RunDir(building).create()
        with run_dir:
            for record in result.records:
                run_dir.append_record(record)
        _write_log(result, run_dir)
        for dump in result.inputs["dumps"]:
            _link_or_copy(Path(dump), run_dir.dumps_dir / Path(dump).name)
        # What ran: the driver's argument print (harness.records.printed_arguments), and the length,
        # so a re-read (and the judge's completeness check) knows which steps to expect.
        flags = flags_from_arguments(result.arguments)
        if result.num_rollout is not None:
            flags["num-rollout"] = result.num_rollout
        if labels or flags:
            # What the run was (rung, stage, mode), so --backend=records can find it for a test.
            run_dir.write_spec({"run_id": out.name, "backend": "records", **(labels or {}), "flags": flags})
        run_dir.write_ingest_info(
            {
                "source": str(result.source),
                "content_sha256": content_hash(Path(result.source)) if Path(result.source).exists() else None,
                "flags_from": "the log's argument print" if result.arguments else None,
                "checkpoint": checkpoint_record(text_flag(flags, "hf-checkpoint")),
                "inputs": result.inputs,
                "tracking": result.tracking,
                "ingested_at": utc_now(),
                "warnings": result.warnings,
                "problems": result.problems,
            }
        )
        failure = primary_failure(result.failures)
        # The run's own span when the log shows it (logging's local time, as printed); else ingest time.
        run_dir.set_status(
            result.state(),
            failure=failure,
            started=result.logged_span[0],
            ended=result.logged_span[1],
            note=result.note if result.state() in ("unfinished", "interrupted") else None,
        )
        _swap_into_place(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return out


def _write_log(result: IngestResult, run_dir: RunDir) -> None:
    """The logs, one after the other in name order as ingest read them, byte for byte except for
    secret values (redact.py), which are written `<redacted>`."""
    logs = [Path(p) for p in result.inputs["logs"]]
    if not logs:
        return
    with run_dir.file(run_dir.LOG).open("wb") as combined:
        for log in logs:
            with log.open("rb") as handle:
                rest = b""
                for chunk in iter(lambda: handle.read(1 << 22), b""):
                    # Whole lines at a time (4 MiB blocks cut at their last newline): a 50 MB log
                    # is redacted by the regex engine, not a Python loop per line.
                    block, rest = _whole_lines(rest + chunk)
                    combined.write(_redacted_bytes(block))
                combined.write(_redacted_bytes(rest))


def _whole_lines(data: bytes) -> tuple[bytes, bytes]:
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def _redacted_bytes(raw: bytes) -> bytes:
    text = raw.decode("utf-8", errors="surrogateescape")
    clean = redact_text(text)
    return raw if clean == text else clean.encode("utf-8", errors="surrogateescape")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # dumps can be large; a hard link costs nothing
    except OSError:
        shutil.copy2(source, target)


def _swap_into_place(building: Path, out: Path) -> None:
    if out.exists():
        retired = out.with_name(f".{out.name}.retired-{os.getpid()}")
        os.replace(out, retired)
        os.replace(building, out)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(building, out)
