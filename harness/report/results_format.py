"""How docs/results.md writes numbers and provenance: one way for every section, so the same figure
reads the same wherever it appears, and every figure's record line has the same four parts."""

from __future__ import annotations

import math


def num(value: float | None, digits: int = 3) -> str:
    """3 significant digits; `—` for a value not measured."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return "—"
    return "0" if value == 0 else f"{value:.{digits}g}"


def signed(value: float | None, decimals: int | None = None) -> str:
    """`+1.23e-03`-style for a difference, or `+8.5` with `decimals` (a margin); `—` when not measured."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:+.{decimals}f}" if decimals is not None else f"{value:+.3g}"


def cell(text: str) -> str:
    """Text as one Markdown table cell: one line, no column bar."""
    return " ".join(str(text).split()).replace("|", "/")


def interval(bounds) -> str:
    return f"[{signed(bounds[0])}, {signed(bounds[1])}]" if bounds else "—"


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min {secs} s"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def mib(size: float | None) -> str:
    return f"{size / 2**20:.0f} MiB" if isinstance(size, (int, float)) else "—"


def record_line(paths: str | list[str], date: str, commit: str, machine: str) -> str:
    """`Record: `path` (date; commit; machine)`: the line every figure's section starts with."""
    names = [paths] if isinstance(paths, str) else list(paths)
    label = "Record" if len(names) == 1 else "Records"
    return f"{label}: {', '.join(f'`{n}`' for n in names)}; made {date}; commit {commit}; machine {machine}"
