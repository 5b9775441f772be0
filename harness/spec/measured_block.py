"""A knobs file's measured block: what a design or calibration tool measured, kept below a marker line
that the tool owns (the head above it is the pre-registration, written by hand, never touched)."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.spec.errors import SpecError


def write_below_marker(path: Path, marker: str, body: dict, **dump_options) -> Path:
    """Replace everything below the marker line of `path` with `body` as YAML; the head stays byte for
    byte. A file without the marker is refused, naming it (the tool would otherwise append a second
    copy of what it owns, or write over a hand-written file)."""
    text = path.read_text()
    if marker not in text:
        raise SpecError(f"{path}: expected the marker line {marker!r}, below which the tool writes what it measured")
    head = text.split(marker)[0]
    path.write_text(head + marker + "\n" + yaml.safe_dump(body, sort_keys=False, **({"width": 110} | dump_options)))
    return path
