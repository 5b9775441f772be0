"""Rows (a list of dicts) as HTML, CSV or Markdown: the one table format every attachment uses.

Columns are the keys of the first row, in order, plus any key a later row adds; a missing cell is
empty. Cells are escaped for their format (HTML entities, Markdown pipes), never interpreted.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Mapping, Sequence

# Readable inside Allure's sandboxed attachment iframe (no external CSS reaches it).
TABLE_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px; margin: 8px; color: #1f2328; }
caption { text-align: left; font-weight: 600; font-size: 14px; padding: 4px 0 8px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fbfcfd; }
p.note { color: #57606a; max-width: 70em; }
"""


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


def to_html(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, title: str | None = None,
            note: str | None = None) -> str:
    """A complete HTML page holding one table (Allure renders an HTML attachment in an iframe)."""
    names = columns_of(rows, columns)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in names)
    body = []
    for row in rows:
        cells = []
        for name in names:
            value = row.get(name)
            css = ' class="num"' if _is_number(value) else ""
            cells.append(f"<td{css}>{html.escape(format_cell(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    note_html = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{TABLE_STYLE}</style></head><body>'
            f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"{note_html}</body></html>")


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
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> str:
    names = columns_of(rows, columns)
    lines = ["| " + " | ".join(_markdown_cell(name) for name in names) + " |",
             "|" + "|".join("---:" if rows and _is_number(rows[0].get(name)) else "---" for name in names) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_markdown_cell(format_cell(row.get(name))) for name in names) + " |")
    return "\n".join(lines) + "\n"
