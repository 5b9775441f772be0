"""Render a resolved spec into VIME's flag language, and parse it back.

The argv is a list, never a shell string: it is handed to a process or a Ray job as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import re

from harness.spec.schema import FlagValue


def format_value(value: FlagValue) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def render_argv(flags: dict[str, FlagValue]) -> list[str]:
    """`true` -> bare switch; `false`/`null` -> absent; anything else -> `--name value`."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(format_value(value))
    return argv


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_BOOLEANS = {"true": True, "false": False}


def parse_value(text: str) -> FlagValue:
    """A flag value as typed: 3 -> int, 0.95 / 1e-05 -> float, true/false -> bool, else the string."""
    if text in _BOOLEANS:
        return _BOOLEANS[text]
    if _NUMBER.match(text):
        try:
            return int(text)
        except ValueError:
            return float(text)
    return text


def parse_argv(argv: Sequence[str]) -> dict[str, FlagValue]:
    """Inverse of render_argv: a `--flag` not followed by a value is a switch."""
    flags: dict[str, FlagValue] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ValueError(f"argv[{i}]={token!r}: expected a flag starting with '--'")
        name = token[2:]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            flags[name] = parse_value(argv[i + 1])
            i += 2
        else:
            flags[name] = True
            i += 1
    return flags
