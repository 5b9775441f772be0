"""Render a resolved spec into VIME's flag language, and parse it back.

The argv is a list, never a shell string: it is handed to a process or a Ray job as is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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


def argv_items(argv: Sequence[str]) -> list[tuple[int, str, str | None]]:
    """The one argv walker: (index, token, value) per `--name value` pair or bare `--switch`
    (value None). A token that is not a flag and follows no flag (a stray) is its own item."""
    items: list[tuple[int, str, str | None]] = []
    i = 0
    while i < len(argv):
        token = str(argv[i])
        if token.startswith("--") and i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
            items.append((i, token, str(argv[i + 1])))
            i += 2
        else:
            items.append((i, token, None))
            i += 1
    return items


def argv_lines(argv: Sequence[str]) -> list[str]:
    """One flag per line, as a launch script reads: easy to diff between rungs."""
    return [token if value is None else f"{token} {value}" for _, token, value in argv_items(argv)]


def parse_argv(argv: Sequence[str], *, skip_strays: bool = False) -> dict[str, FlagValue]:
    """Inverse of render_argv: a `--flag` not followed by a value is a switch. A token that is not
    a flag is an error, or skipped with `skip_strays` (a logged command line may hold a script name)."""
    flags: dict[str, FlagValue] = {}
    for i, token, value in argv_items(argv):
        if not token.startswith("--"):
            if skip_strays:
                continue
            raise ValueError(f"argv[{i}]={token!r}: expected a flag starting with '--'")
        flags[token[2:]] = True if value is None else parse_value(value)
    return flags
