"""TensorBoard event files written by VIME's `--use-tensorboard` -> records.

VIME's TensorBoard adapter calls `add_scalar(key, value, step)` for every key of each logged
dict, so a tag is a metric name (`train/train_rollout_logprob_abs_diff`) and the event's step is
the record's n (`train/step` for train metrics, `rollout/step` for rollout and perf metrics).
The tag's prefix decides the record kind; scalars are stored as float32, so values read back
from events differ from the log's text in the 8th digit.
"""

from __future__ import annotations

from pathlib import Path

from harness.records.models import Record

_KIND_BY_PREFIX = {"train": "step", "rollout": "rollout", "perf": "perf", "eval": "eval"}


def is_event_file(path: Path) -> bool:
    return "tfevents" in path.name


def read_event_file(path: Path) -> tuple[list[Record], list[str]]:
    """Records (one per kind and step) and warnings; a truncated file yields what precedes the cut."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    grouped: dict[tuple[str, int], dict] = {}
    warnings: list[str] = []
    unprefixed: set[str] = set()
    events = 0
    try:
        for event in EventFileLoader(str(path)).Load():
            events += 1
            for value in event.summary.value:
                kind = _KIND_BY_PREFIX.get(value.tag.split("/", 1)[0])
                if kind is None:
                    unprefixed.add(value.tag)
                    kind = "rollout"  # VIME logs its other groups (passrate/, multi_turn/) on the rollout step
                number = _scalar(value, tensor_util)
                if number is None:
                    continue
                grouped.setdefault((kind, int(event.step)), {})[value.tag] = number
    except Exception as err:  # the loader raises assorted errors on damaged files
        warnings.append(f"{path}: event file damaged after {events} events ({type(err).__name__}: {err}); kept what preceded it")
    if unprefixed:
        warnings.append(f"{path}: tags without a train/rollout/perf/eval prefix recorded as rollout metrics: {', '.join(sorted(unprefixed)[:5])}")
    records = [Record(kind=kind, n=n, metrics=metrics) for (kind, n), metrics in sorted(grouped.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    return records, warnings


def _scalar(value, tensor_util) -> float | None:
    which = value.WhichOneof("value")
    if which == "simple_value":
        return float(value.simple_value)
    if which == "tensor":
        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1 and array.dtype.kind in "fiub":
            return float(array.reshape(-1)[0])
    return None
