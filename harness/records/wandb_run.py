"""A W&B run (VIME's `--use-wandb`) -> records: an offline run directory, or an online run by path.

VIME's `log(args, metrics, step_key)` sends each logged dict to `wandb.log` with its step key in it
(`train/step` for train metrics, `rollout/step` for rollout and perf metrics), so one history row
is one logged record: its kind is the row's metric group (a row with `perf/` keys is a `perf`
record, even with the rollout manager's `rollout/response_len/*` beside them; `train/` a `step`,
`eval/` an `eval`, else `rollout`) and its n is the row's step key. Values are JSON, exactly as
logged: nan and inf come back as nan and inf, float64 (TensorBoard keeps float32).

Offline: the run's `run-<id>.wandb` transaction log, read record by record as wandb's own
protobuf `Record` messages (`wandb.proto.wandb_internal_pb2`). wandb 0.31 has no Python reader of
its own any more (the store moved into its Go core), so the framing is read here: LevelDB's log
format (32 KiB blocks, a 7-byte header per chunk: CRC-32 of type and data, length, type) after
the file's 7-byte `:W&B` header. A chunk whose checksum fails, or a file cut short, ends the read
with a warning: the records before it stand. Online: `wandb.Api().run(path).scan_history()`,
which needs the network and an API key; without them the run is one problem line.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.models import Record

_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK, _CHUNK_HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_STEP_KEYS = {"step": "train/step", "rollout": "rollout/step", "perf": "rollout/step", "eval": "eval/step"}
# `wandb:entity/project/run_id`, or the run's page `https://<host>/entity/project/runs/run_id`.
_ONLINE = re.compile(r"^(?:wandb:(?P<path>[^/\s]+/[^/\s]+/[^/\s]+)|(?P<url>https?://[^/\s]+/(?P<e>[^/\s]+)/(?P<p>[^/\s]+)/runs/(?P<r>[^/?#\s]+)))")


@dataclass
class WandbRun:
    """What one W&B run holds for the records: its records, config and where it is."""

    source: str
    records: list[Record] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    run_id: str | None = None
    project: str | None = None
    entity: str | None = None
    exit_code: int | None = None  # None: the run has no exit record (killed, or still running)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def path(self) -> str | None:
        """entity/project/run_id, W&B's own name for a run (offline runs have no entity yet)."""
        if not self.run_id:
            return None
        return "/".join(part or "-" for part in (self.entity, self.project, self.run_id))

    def num_rollout(self) -> int | None:
        value = self.config.get("num_rollout")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_wandb_file(path: Path) -> bool:
    return path.suffix == ".wandb" and path.is_file()


def online_path(text: str) -> str | None:
    """entity/project/run_id when `text` names an online run (wandb:... or its URL), else None."""
    match = _ONLINE.match(text)
    if not match:
        return None
    return match.group("path") or f"{match.group('e')}/{match.group('p')}/{match.group('r')}"


def row_record(row: dict, at: str) -> Record | None:
    """One history row (one wandb.log call) -> one record; None for a row with no metric group."""
    metrics = {k: v for k, v in row.items() if not k.startswith("_")}
    groups = {k.split("/", 1)[0] for k in metrics if "/" in k}
    kind = "perf" if "perf" in groups else "step" if "train" in groups else "eval" if "eval" in groups else "rollout" if groups else None
    if kind is None:
        return None
    step_key = _STEP_KEYS[kind]
    n = metrics.get(step_key, row.get("_step"))
    if not isinstance(n, (int, float)) or isinstance(n, bool) or not math.isfinite(n):
        return None
    values = {k: v for k, v in metrics.items() if k != step_key and (v is None or isinstance(v, (int, float, str)))}
    values = {k: int(v) if isinstance(v, bool) else v for k, v in values.items()}
    return Record(kind=kind, n=int(n), metrics=values, source=at)


def read_offline(path: Path) -> WandbRun:
    """An offline run: its directory (offline-run-*/ or run-*/) or its run-<id>.wandb file."""
    from wandb.proto import wandb_internal_pb2

    path = Path(path)
    files = sorted(path.glob("run-*.wandb")) if path.is_dir() else [path]
    run = WandbRun(source=str(path))
    if len(files) != 1:
        found = f"{len(files)} ({', '.join(f.name for f in files)})" if files else "none"
        run.problems.append(f"{path}: expected one run-<id>.wandb file in a W&B run directory, found {found}")
        return run
    for payload in _chunks(files[0], run):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception as err:  # protobuf's DecodeError and friends
            run.warnings.append(f"{files[0]}: a record does not decode ({type(err).__name__}); skipped")
            continue
        _take(record, run, f"wandb {files[0].name}")
    return run


def _chunks(file: Path, run: WandbRun):
    data = file.read_bytes()
    if not data.startswith(_HEADER):
        run.problems.append(f"{file}: not a W&B transaction log (expected the ':W&B' header, got {data[:7]!r})")
        return
    pos, pending = len(_HEADER), b""
    while pos + _CHUNK_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER:  # a block's tail too short for a header is zero padding
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + _CHUNK_HEADER])
        if kind == 0 and length == 0:
            break  # zeros: preallocated space after the last record
        chunk = data[pos + _CHUNK_HEADER : pos + _CHUNK_HEADER + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            run.warnings.append(f"{file}: damaged or cut at byte {pos}; kept the records before it")
            return
        pos += _CHUNK_HEADER + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def _take(record, run: WandbRun, at: str) -> None:
    which = record.WhichOneof("record_type")
    if which == "run":
        run.run_id, run.project, run.entity = record.run.run_id or None, record.run.project or None, record.run.entity or None
        run.config.update(_items(record.run.config.update))
    elif which == "config":
        run.config.update(_items(record.config.update))
    elif which == "history":
        row = dict(_items(record.history.item))
        row.setdefault("_step", record.history.step.num)
        made = row_record(row, at)
        if made is not None:
            run.records.append(made)
    elif which == "exit":
        run.exit_code = record.exit.exit_code


def _items(items):
    for item in items:
        key = item.key or "/".join(item.nested_key)
        try:
            yield key, json.loads(item.value_json)  # Python's json reads NaN and Infinity as W&B writes them
        except ValueError:
            yield key, item.value_json


def read_online(path: str) -> WandbRun:
    """An online run through wandb's public API; without network or credentials, one problem line."""
    run = WandbRun(source=f"wandb:{path}")
    try:
        import wandb

        api_run = wandb.Api(timeout=20).run(path)
        run.run_id, run.project, run.entity = api_run.id, api_run.project, api_run.entity
        run.config = dict(api_run.config)
        for row in api_run.scan_history():
            made = row_record(row, f"wandb {path}")
            if made is not None:
                run.records.append(made)
        state = getattr(api_run, "state", None)
        run.exit_code = 0 if state == "finished" else 1 if state in ("failed", "crashed") else None
    except Exception as err:  # wandb raises its own error types (UsageError, CommError, ...) and requests' errors
        first = " ".join(str(err).split())[:200] or type(err).__name__
        run.problems.append(
            f"wandb:{path}: the run could not be read through wandb's public API ({type(err).__name__}: {first}); "
            f"an online run needs network access to its W&B server and an API key (WANDB_API_KEY or `wandb login`)"
        )
    return run
