"""Peel one raw log line down to its message: what Ray, the terminal and Python logging add.

A line as it reaches the driver's stdout can carry, outside in:
  ANSI colour codes                    `\x1b[36m(MegatronTrainRayActor pid=1234)\x1b[0m `
  a Ray actor prefix                   `(RolloutManager pid=77, ip=10.0.0.2) `
  Python logging's prefix (VIME's)     `[2026-11-20 10:00:01] train.py:123 - `
  the message                          `step 3: {'train/loss': 0.1}`
  Ray's dedup suffix                   ` [repeated 7x across cluster] (Ray deduplicates logs ...)`
and progress bars redraw with carriage returns, so only the text after the last `\r` is shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Ray prefixes name the actor (or task) and pid, with the node ip on multi-node clusters, or a
# system component such as (raylet) / (gcs_server).
_ACTOR_PREFIX = re.compile(r"^\((?P<source>[^()\n]*?pid=[^()\n]*|raylet[^()\n]*|gcs_server[^()\n]*)\)\s?")
_REPEATED_SUFFIX = re.compile(
    r"\s*\[repeated (?P<count>\d+)x across cluster\]"
    r"(?:\s*\(Ray deduplicates logs by default\.[^)]*(?:\([^)]*\)[^)]*)*\))?\s*$"
)
_LOG_PREFIX = re.compile(
    r"^\[(?P<timestamp>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)[^\]]*\]\s+"
    r"(?P<file>[\w.\-/]+\.py):(?P<lineno>\d+)\s+-\s+"
)


@dataclass(frozen=True)
class CleanLine:
    message: str  # the logged message, prefixes and suffixes removed
    source: str | None = None  # Ray actor, e.g. "MegatronTrainRayActor pid=1234"
    repeated: int | None = None  # Ray's "[repeated Nx across cluster]" count
    timestamp: str | None = None  # from Python logging's prefix, when present
    logged_at: str | None = None  # "train.py:123", when present


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def clean_line(raw: str) -> CleanLine:
    text = raw.rstrip("\r\n")
    if "\r" in text:
        # A progress bar redrew the line; the terminal shows only the last non-empty segment.
        segments = [segment for segment in text.split("\r") if segment.strip()]
        text = segments[-1] if segments else ""
    text = strip_ansi(text)

    repeated = None
    suffix = _REPEATED_SUFFIX.search(text)
    if suffix:
        repeated = int(suffix.group("count"))
        text = text[: suffix.start()]

    source = None
    prefix = _ACTOR_PREFIX.match(text)
    if prefix:
        source = prefix.group("source").strip()
        text = text[prefix.end() :]

    timestamp = logged_at = None
    log_prefix = _LOG_PREFIX.match(text)
    if log_prefix:
        timestamp = log_prefix.group("timestamp")
        logged_at = f"{log_prefix.group('file')}:{log_prefix.group('lineno')}"
        text = text[log_prefix.end() :]
    return CleanLine(text.rstrip(), source, repeated, timestamp, logged_at)


def actor_class(source: str | None) -> str | None:
    """ "RolloutManager pid=77, ip=10.0.0.2" -> "RolloutManager" (None for pid-only prefixes)."""
    if not source:
        return None
    head = source.split(" pid=", 1)[0].strip()
    return None if head.startswith("pid=") else head
