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
    """`true` -> bare switch; `false`/`null` -> absent; a list -> `--name v1 v2 ...` (argparse's
    nargs); anything else -> `--name value`."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if isinstance(value, list):
            argv.extend(format_value(item) for item in value)
        elif value is not True:
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


def argv_items(argv: Sequence[str]) -> list[tuple[int, str, list[str]]]:
    """The one argv walker: (index, token, values) per `--name value ...` (every token up to the
    next flag is a value, as argparse's nargs reads them) or bare `--switch` (no values). A token
    that is not a flag and follows no flag (a stray) is its own item."""
    items: list[tuple[int, str, list[str]]] = []
    i = 0
    while i < len(argv):
        token = str(argv[i])
        values: list[str] = []
        if token.startswith("--"):
            while i + 1 + len(values) < len(argv) and not str(argv[i + 1 + len(values)]).startswith("--"):
                values.append(str(argv[i + 1 + len(values)]))
        items.append((i, token, values))
        i += 1 + len(values)
    return items


def argv_lines(argv: Sequence[str]) -> list[str]:
    """One flag per line, as a launch script reads: easy to diff between rungs."""
    return [" ".join([token, *values]) for _, token, values in argv_items(argv)]


def parse_argv(argv: Sequence[str], *, skip_strays: bool = False) -> dict[str, FlagValue]:
    """Inverse of render_argv: a `--flag` not followed by a value is a switch, one followed by
    several is a list. A token that is not a flag is an error, or skipped with `skip_strays` (a
    logged command line may hold a script name)."""
    flags: dict[str, FlagValue] = {}
    for i, token, values in argv_items(argv):
        if not token.startswith("--"):
            if skip_strays:
                continue
            raise ValueError(f"argv[{i}]={token!r}: expected a flag starting with '--'")
        if not values:
            flags[token[2:]] = True
        else:
            flags[token[2:]] = parse_value(values[0]) if len(values) == 1 else [parse_value(v) for v in values]
    return flags
