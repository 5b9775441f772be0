"""Parse VIME's driver output into records and failure signatures.

`LogParser` is fed one raw line at a time (the launcher streams a live run through it);
`parse_log_lines` and `parse_log_file` are the one-shot forms. Rules, in the order they apply:

- Each line is peeled by `lineclean.clean_line` (ANSI, Ray actor prefix, logging prefix, Ray's
  `[repeated Nx across cluster]` suffix). A message `step|rollout|perf|eval N: {...}` is a record;
  its dict is read by `pyliteral` (nan/inf/np.float64 tolerated, never eval).
- Every record is kept as logged, in line order, with its actor as `source`: VIME prints `perf N`
  twice per rollout (rollout manager, trainer), and both stay. Views that need one value per
  (kind, n) merge them with `merge.merge_records` (first value wins; see docs/records.md).
- A record whose dict does not parse: on the last line it is a truncated record (parsing stopped
  there, `stopped_at`); anywhere else it is skipped with a warning.
- A record number that goes backwards for the same actor class (repeats excepted) means two
  runs' output was mixed into one log: warned, everything kept.
- A NUL byte stops parsing (binary data); `stopped_at` says where.
- An argument line as Megatron's `_print_args` writes it (`  num_rollout ........ 100`, under
  `---- arguments ----`) is kept, as printed, in `arguments`: it says how many rollouts the run
  was launched with, which is how a log with no end line is known to be finished (completion.py).
  VIME's train.py prints no end line; nothing here waits for one.
- Other lines are checked for failure signatures (`failures.py`); traceback frames are skipped,
  and a signature with the same text (digits aside) as an earlier one is not repeated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from harness.records.failures import TRACEBACK_HEADER, match_signature
from harness.records.lineclean import CleanLine, actor_class, clean_line
from harness.records.models import Failure, ParseResult, Record
from harness.records.pyliteral import LiteralSyntaxError, parse_dict

# Megatron's _print_args: "  {name} {'.' * (48 - len(name))} {value}", sorted, between a title line
# and an "end of" line. Only lines inside such a block, from the actor that opened it, are arguments
# (prose with dots elsewhere is not). Python logging's prefix, when the driver's print goes through a
# logger, eats the indent, so the indent is optional.
_ARGUMENTS_OPEN = re.compile(r"^-{3,} (?!end of )(?P<title>[\w ]*arguments) -{3,}$")
_ARGUMENTS_CLOSE = re.compile(r"^-{3,} end of [\w ]*arguments -{3,}$")
# A name of 48 characters or more gets no dots: `  name  value`.
_ARGUMENT = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*) (?:\.+ | )(?P<value>.*)$")
_RECORD = re.compile(r"^(?P<kind>step|rollout|perf|eval) (?P<n>-?\d+): (?P<payload>\{.*)$")
_DIGITS = re.compile(r"\d+")
# W&B's own banner (stderr, merged into the log): where the run's data is, and its page when online.
_WANDB_LINES = (
    ("wandb_dir", re.compile(r"^wandb: Run data is saved locally in (?P<value>\S+)")),
    ("wandb_url", re.compile(r"^wandb: \W*View run .* at: (?P<value>https?://\S+)")),
    ("wandb_project_url", re.compile(r"^wandb: \W*View project at: (?P<value>https?://\S+)")),
)
_BINARY_PROBE_BYTES = 8192
# A node's description, printed inside a Ray job before the trainer (harness.launch.node_probe).
_PROVENANCE = "LAB_PROVENANCE "


def _same_value(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)  # nan == nan here


class LogFileError(ValueError):
    """A log file that cannot be parsed at all; the message is one line naming the file."""


class LogParser:
    def __init__(self) -> None:
        self.line_no = 0
        self.result = ParseResult()
        self._stopped = False
        self._pending_malformed: tuple[int, str, str] | None = None  # (line, kind, reason)
        self._in_traceback: dict[str | None, bool] = {}
        self._seen_failures: set[tuple[str, str]] = set()
        self._last_n: dict[tuple[str, str | None], tuple[int, int]] = {}
        self._mixed_reported = False
        self._first_records: dict[tuple, Record] = {}
        self._first_by_class: dict[tuple, Record] = {}
        self._ranks_reported: set[tuple] = set()
        self._arguments_of: tuple[str | None] | None = None  # inside an argument print: the actor printing it

    def feed(self, raw: str) -> list[Record | Failure]:
        """Parse the next raw line; returns the records and failures it produced."""
        if self._stopped:
            return []
        self.line_no += 1
        self._settle_pending()
        if "\x00" in raw:
            self._stop(f"line {self.line_no}: binary data (NUL bytes); stopped there, parsed {self.line_no - 1} lines")
            return []
        line = clean_line(raw)
        if line.timestamp:
            self.result.first_timestamp = self.result.first_timestamp or line.timestamp
            self.result.last_timestamp = line.timestamp
        match = _RECORD.match(line.message)
        if match:
            return self._record(match, line)
        if self._arguments_of is not None and line.source == self._arguments_of[0]:
            argument = _ARGUMENT.match(line.message)
            if argument:
                self._argument(argument.group("name"), argument.group("value"))
                return []
            if _ARGUMENTS_CLOSE.match(line.message):
                self._arguments_of = None
                return []
        if _ARGUMENTS_OPEN.match(line.message):
            self._arguments_of = (line.source,)
            return []
        if line.message.startswith(_PROVENANCE):
            try:
                described = json.loads(line.message[len(_PROVENANCE) :])
            except json.JSONDecodeError:
                described = None
            if isinstance(described, dict):
                self.result.provenance.append(described)
                return []
        if line.message.startswith("wandb: "):
            for key, pattern in _WANDB_LINES:
                found = pattern.match(line.message)
                if found and key not in self.result.tracking:
                    self.result.tracking[key] = found.group("value")
        return self._failure(line)

    def finish(self) -> ParseResult:
        if self._pending_malformed and not self._stopped:
            at, kind, reason = self._pending_malformed
            self._pending_malformed = None
            self._stop(f"line {at}: truncated {kind} record ({reason}), parsed {at - 1} lines", at=at)
        self.result.lines_read = self.line_no
        return self.result

    # --- records
    def _record(self, match: re.Match, line: CleanLine) -> list[Record | Failure]:
        kind, n = match.group("kind"), int(match.group("n"))
        try:
            raw_metrics = parse_dict(match.group("payload"))
        except LiteralSyntaxError as err:
            self._pending_malformed = (self.line_no, kind, " ".join(str(err).split())[:200])
            return []
        metrics = self._flatten(raw_metrics)
        record = Record(kind=kind, n=n, metrics=metrics, line=self.line_no, source=line.source)
        if line.repeated is None:
            self._check_order(record)
            self._check_repeat(record)
        self.result.records.append(record)
        return [record]

    def _check_repeat(self, record: Record) -> None:
        """The same actor logging `step N` twice with a different value for one key: two runs (or a
        restart) in one log. Merged views keep the first value, so the second must not pass unsaid."""
        key = (record.kind, record.n, record.source)
        first = self._first_records.get(key)
        if self._mixed_reported:
            return  # a log already found to mix two runs: its repeats are that same story
        self._check_other_ranks(record)
        if first is None:
            self._first_records[key] = record
            return
        for name, value in record.metrics.items():
            if name in first.metrics and not _same_value(first.metrics[name], value):
                self._bad(
                    f"line {record.line}: {record.kind} {record.n} logged again (first at line {first.line}) "
                    f"with {name} = {value!r}, not {first.metrics[name]!r}: duplicate {record.kind} with different "
                    f"values; the first is kept"
                )
                return

    def _check_other_ranks(self, record: Record) -> None:
        """Two processes of one actor class (two trainer ranks) logging the same record number with
        different values: the merged view keeps the first, so the disagreement is said once."""
        cls = actor_class(record.source)
        if cls is None:
            return
        other = self._first_by_class.setdefault((record.kind, record.n, cls), record)
        if other is record or other.source == record.source or (record.kind, cls) in self._ranks_reported:
            return
        for name, value in record.metrics.items():
            if name in other.metrics and not _same_value(other.metrics[name], value):
                self._ranks_reported.add((record.kind, cls))
                self.result.warnings.append(
                    f"line {record.line}: {record.kind} {record.n} logged by {record.source} with {name} = {value!r}, but by "
                    f"{other.source} (line {other.line}) = {other.metrics[name]!r}: two ranks disagree; the first is kept"
                )
                return

    def _flatten(self, raw: dict, prefix: str = "") -> dict:
        metrics: dict = {}
        for key, value in raw.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                metrics.update(self._flatten(value, f"{name}/"))
            elif isinstance(value, bool):
                metrics[name] = int(value)
            elif value is None or isinstance(value, (int, float, str)):
                metrics[name] = value
            else:
                self.result.warnings.append(f"line {self.line_no}: metric {name!r} is a {type(value).__name__}, not a scalar; left out")
        return metrics

    def _check_order(self, record: Record) -> None:
        key = (record.kind, actor_class(record.source))
        previous = self._last_n.get(key)
        if previous and record.n < previous[0] and not self._mixed_reported:
            self._mixed_reported = True  # one line says it; every later restart is the same story
            who = f" from {key[1]}" if key[1] else ""
            self._bad(
                f"line {record.line}: {record.kind} {record.n} follows {record.kind} {previous[0]} "
                f"(line {previous[1]}){who}: the log mixes the output of more than one run; all records kept"
            )
        self._last_n[key] = (record.n, record.line)

    def _settle_pending(self) -> None:
        if self._pending_malformed:
            at, kind, reason = self._pending_malformed
            self._pending_malformed = None
            self._bad(f"line {at}: malformed {kind} record skipped ({reason})")

    # --- arguments
    def _argument(self, name: str, value: str) -> None:
        printed = self.result.arguments
        if name not in printed:
            printed[name] = value
            self.result.argument_lines[name] = self.line_no
        elif printed[name] != value and not self._mixed_reported:
            # A second driver's print with another value: the log holds two launches. The first is kept.
            self._mixed_reported = True
            self._bad(
                f"line {self.line_no}: argument {name} printed again as {value!r} (first {printed[name]!r} at line "
                f"{self.result.argument_lines[name]}): the log mixes the output of more than one run; the first is kept"
            )

    # --- failures
    def _failure(self, line: CleanLine) -> list[Record | Failure]:
        message, source = line.message, line.source
        if self._in_traceback.get(source):
            if not message.strip() or message[0] in " \t":
                return []  # frames and source lines: their code mentions errors it did not raise
            self._in_traceback[source] = False
        if message.startswith(TRACEBACK_HEADER):
            self._in_traceback[source] = True
        signature = match_signature(message)
        if signature is None:
            return []
        key = (signature, _DIGITS.sub("#", message))
        if key in self._seen_failures:
            return []
        self._seen_failures.add(key)
        text = f"({source}) {message}" if source else message
        failure = Failure(signature=signature, line=self.line_no, text=text[:2000])
        self.result.failures.append(failure)
        return [failure]

    # --- bookkeeping
    def _bad(self, message: str) -> None:
        self.result.warnings.append(message)
        self.result.bad_input.append(message)

    def _stop(self, message: str, at: int | None = None) -> None:
        self._stopped = True
        self.result.stopped_at = at if at is not None else self.line_no
        self._bad(message)


def parse_log_lines(lines: Iterable[str]) -> ParseResult:
    parser = LogParser()
    for raw in lines:
        parser.feed(raw)
    return parser.finish()


def parse_log_file(path: str | Path) -> ParseResult:
    """Parse a log file; raises LogFileError (one line naming the file) when nothing can be read."""
    path = Path(path)
    check_log_file(path)
    parser = LogParser()
    with path.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        for raw in _physical_lines(handle):
            parser.feed(raw)
    return parser.finish()


def check_log_file(path: Path) -> None:
    if not path.exists():
        raise LogFileError(f"{path}: no such file")
    if path.is_dir():
        raise LogFileError(f"{path}: is a directory, expected a VIME log file")
    with path.open("rb") as handle:
        head = handle.read(_BINARY_PROBE_BYTES)
    if not head.strip():
        raise LogFileError(f"{path}: empty file, expected VIME log text")
    if b"\x00" in head:
        offset = head.index(b"\x00")
        raise LogFileError(f"{path}: binary data (NUL byte at offset {offset}), expected VIME log text")


def _physical_lines(handle) -> Iterable[str]:
    # Split on \n only: a bare \r is a progress bar redrawing its line, not a new log line.
    buffer = ""
    for chunk in iter(lambda: handle.read(1 << 20), ""):
        buffer += chunk
        *complete, buffer = buffer.split("\n")
        for line in complete:
            yield line + "\n"
    if buffer:
        yield buffer
