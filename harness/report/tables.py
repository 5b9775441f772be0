"""Rows (a list of dicts) as Markdown or CSV: the table format every attachment uses.

Markdown, not HTML: Allure 3.18's awesome report shows an HTML attachment in an iframe of the
browser's default 150 px height (a table longer than a few rows is cut off), while it renders a
text/markdown attachment inline at full height. CSV carries the full-precision values.

Columns are the keys of the first row, in order, plus any key a later row adds; a missing cell is
empty. Cells are escaped for their format (Markdown pipes and HTML brackets), never interpreted.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence


def columns_of(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> list[str]:
    if columns is not None:
        return list(columns)
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def format_cell(value) -> str:
    """Numbers with 4 significant digits (abs-diff values span 1e-7..1e-1), None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}"
    return str(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def to_csv(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> str:
    """CSV with raw values (full precision), so a spreadsheet can recompute anything shown."""
    names = columns_of(rows, columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: "" if row.get(name) is None else row.get(name) for name in names})
    return out.getvalue()


def _markdown_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def to_markdown(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, title: str | None = None, note: str | None = None) -> str:
    """A GitHub-flavoured Markdown table, with an optional heading above and note below."""
    names = columns_of(rows, columns)
    lines = [
        "| " + " | ".join(_markdown_cell(name) for name in names) + " |",
        "|" + "|".join("---:" if rows and _is_number(rows[0].get(name)) else "---" for name in names) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_markdown_cell(format_cell(row.get(name))) for name in names) + " |")
    heading = f"### {_markdown_cell(title)}\n\n" if title else ""
    footer = f"\n{note}\n" if note else ""
    return heading + "\n".join(lines) + "\n" + footer
