"""Command-line arguments checked before a command does anything: paths and numbers.

Each check raises SpecError with one line naming the option, the path or value, and what was
expected, so the CLI prints it and exits 2 without having read, written or launched anything.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from harness.spec.errors import SpecError


def positive_seconds(text: str) -> float:
    """An argparse `type` for a time limit: a finite number of seconds > 0 (argparse names the option)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def existing_dir(path: str | Path, option: str, what: str = "a directory") -> Path:
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{option} {path}: no such directory, expected {what}")
    if not path.is_dir():
        raise SpecError(f"{option} {path}: is a file, expected {what}")
    if not os.access(path, os.R_OK | os.X_OK):
        raise SpecError(f"{option} {path}: not readable, expected {what}")
    return path


def existing_path(path: str | Path, option: str, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{option} {path}: no such file or directory, expected {what}")
    if not os.access(path, os.R_OK):
        raise SpecError(f"{option} {path}: not readable, expected {what}")
    return path


def writable_dir(path: str | Path, option: str) -> Path:
    """A directory this command may create files in: it exists and is writable, or it can be made."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecError(f"{option} {path}: is a file, expected a directory to write into")
    anchor = _nearest_existing(path)
    if not anchor.is_dir():
        raise SpecError(f"{option} {path}: {anchor} is a file, so this directory cannot be created")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise SpecError(f"{option} {path}: {anchor} is not writable")
    return path
