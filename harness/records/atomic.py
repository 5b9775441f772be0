"""Write a file so that a reader (or a crash) never sees half of it: temp file, fsync, rename."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

# mkstemp creates files 0600; a run record is meant to be read by others, so apply the umask.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_json(value, indent: int | None = 2) -> str:
    # nan/inf are kept as NaN/Infinity (Python's json reads them back): a nan loss is a finding,
    # and turning it into null would hide it.
    return json.dumps(value, indent=indent, allow_nan=True, default=str)


def atomic_write_json(path: Path, value) -> None:
    atomic_write_text(path, to_json(value) + "\n")
