"""One value per (metric, n) from records that may say the same thing twice.

VIME prints `perf N` twice per rollout (the rollout manager's, with rollout/* and perf/* keys
about generation; the trainer's, with perf/* timings of training) and Ray can re-print a line
with `[repeated Nx across cluster]`. The records keep every line; these views merge them:

- records are grouped by n across kinds (a metric name's prefix already says what it is:
  train/* keys come from `step N`, rollout/* and perf/* from `rollout N` / `perf N`, eval/*
  from `eval N`);
- within a group, the first logged value of a key wins; a later different value for the same key
  and n is reported as a conflict (nan equals nan here), never silently averaged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from harness.records.models import Record


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def merge_records(records: Iterable[Record]) -> tuple[dict[int, dict], list[str]]:
    """n -> {metric: value}, merged in line order, plus one message per conflicting value."""
    merged: dict[int, dict] = {}
    conflicts: list[str] = []
    for record in records:
        group = merged.setdefault(record.n, {})
        for key, value in record.metrics.items():
            if key not in group:
                group[key] = value
            elif not _same(group[key], value):
                where = f" ({record.source})" if record.source else ""
                conflicts.append(f"{key} at n={record.n}: kept {group[key]!r}, a later {record.kind} record{where} says {value!r}")
    return merged, conflicts


def metric_series(records: Iterable[Record], name: str) -> list[tuple[int, float | int]]:
    """[(n, value)] for one metric name, sorted by n; non-numeric values are left out."""
    merged, _ = merge_records(r for r in records if name in r.metrics)
    points = []
    for n in sorted(merged):
        value = merged[n][name]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            points.append((n, value))
    return points


def metric_names(records: Iterable[Record]) -> list[str]:
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record.metrics))
    return sorted(names)
