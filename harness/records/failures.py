"""Failure signatures: which log lines mean the run hit one of the failures the seed names.

One signature per line, the first that matches in this order: the most specific cause first, so
`RayTaskError(OutOfMemoryError) ... CUDA out of memory` is a CUDA OOM, a NCCL watchdog timeout is
a NCCL error and a 504 Gateway Timeout is an HTTP error, not a plain timeout.
"""

from __future__ import annotations

import re

SIGNATURE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        (
            "nccl-error",
            r"NCCL error|nccl(?:SystemError|InternalError|UnhandledCudaError|InvalidUsage|RemoteError)"
            r"|NCCL communicator was aborted|Watchdog caught collective operation timeout|DistBackendError",
        ),
        ("cuda-illegal-memory-access", r"illegal memory access|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS"),
        ("cuda-oom", r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"),
        ("engine-dead", r"EngineDead|Engine core (?:proc )?\S* ?died|EngineCore encountered a fatal error"),
        (
            "ray-actor-died",
            r"ActorDiedError|RayActorError|ActorUnavailableError|The actor died|actor died unexpectedly"
            r"|A worker died or was killed|ray\.exceptions\.OutOfMemoryError|WorkerCrashedError",
        ),
        ("connection-refused", r"ConnectionRefusedError|Connection refused|ECONNREFUSED"),
        (
            "http-error",
            r"HTTPError|HTTPStatusError|ClientResponseError|HTTP Error \d{3}"
            r"|\b[45]\d\d (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout|Bad Request|Not Found)\b"
            r"|status(?:[ _]code)?\s*[=:]?\s*5\d\d\b",
        ),
        ("timeout", r"\bTimeoutError\b|\btimed out\b|Read ?Timeout|Connect ?Timeout|GetTimeoutError|\bDeadline ?Exceeded\b"),
        ("python-traceback", r"^Traceback \(most recent call last\):"),
    )
)

TRACEBACK_HEADER = "Traceback (most recent call last):"


# A quoted string on a line: a command the log echoes (`rg -n "...|CUDA out of memory|..." "$LOG"`,
# a launch script under `set -x`) names the errors it searches for; it did not hit them.
# A quote opens and closes at word edges, so the apostrophes of "can't ... don't" quote nothing.
_QUOTED = re.compile(r"(?<!\w)(?:\"[^\"]*\"|'[^']*')(?!\w)")


def match_signature(message: str) -> str | None:
    """The first signature found on the line outside quoted strings (a quoted one is a search
    pattern or an argument, not an error the run raised)."""
    unquoted = _QUOTED.sub(lambda m: " " * len(m.group(0)), message)
    for name, pattern in SIGNATURE_PATTERNS:
        if pattern.search(unquoted):
            return name
    return None


def primary_failure(failures):
    """The failure that best names why a run died: the first specific signature, else the first
    traceback (a traceback header comes before the exception line that says what happened)."""
    specific = [f for f in failures if f.signature != "python-traceback"]
    return (specific or list(failures) or [None])[0]
