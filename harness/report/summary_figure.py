"""The summary table drawn as a PNG, the form Allure 3.18 always shows in full.

Allure's awesome report puts HTML and Markdown attachments in iframes that it sizes on load; in
3.18 that often leaves them at the browser's default 150 px (allure3 issues #800/#833), cutting a
table after two rows. Images are shown at their natural size, so the report's first view of the
summary is this figure; the Markdown and CSV versions are attached beside it for copying.
"""

from __future__ import annotations

import io
import textwrap

from harness.report.plots import DPI, plt
from harness.report.summary import COLUMNS, TITLE, SummaryRow

# Characters per line before a cell wraps, by column: keeps the 11 columns readable at 1:1 scale.
WRAP = {
    "Run": 14,
    "Hardware": 20,
    "Mode": 12,
    "Precision": 16,
    "Operator Path": 22,
    "Final Reward": 8,
    "logprob_abs_diff Mean": 16,
    "abs_diff 95% CI": 12,
    "Δ vs parent": 14,
    "Step Time Mean": 8,
    "Notes": 30,
}
HEADER_COLOUR = "#e8eef6"
STRIPE_COLOUR = "#f7f9fc"


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=True, break_on_hyphens=False)) or ""


def summary_table_figure(rows: list[SummaryRow]):
    """A matplotlib figure of the table; row heights follow the most-wrapped cell of each row."""
    header = [_wrap(name, WRAP[name]) for name in COLUMNS]
    body = [[_wrap(row.display()[name], WRAP[name]) for name in COLUMNS] for row in rows]
    lines_per_row = [max(cell.count("\n") + 1 for cell in cells) for cells in [header, *body]]
    height_in = 0.6 + 0.19 * sum(lines_per_row) + 0.08 * len(lines_per_row)
    widths = [WRAP[name] for name in COLUMNS]
    fig = plt.figure(figsize=(0.085 * sum(widths) + 0.4, height_in), dpi=DPI)
    ax = fig.add_axes((0.005, 0.01, 0.99, 0.98 - 0.4 / height_in))
    ax.axis("off")
    fig.suptitle(TITLE, x=0.005, y=0.995, ha="left", va="top", fontsize=11, fontweight="bold")
    table = ax.table(cellText=body, colLabels=header, colWidths=[w / sum(widths) for w in widths], cellLoc="left", colLoc="left", bbox=(0, 0, 1, 1))
    table.auto_set_font_size(False)
    table.set_fontsize(8.5)
    unit = 1.0 / (sum(lines_per_row) + 0.4 * len(lines_per_row))  # fractions of the axes, summing to 1
    for (row_index, _), cell in table.get_celld().items():
        cell.set_height(unit * (lines_per_row[row_index] + 0.4))
        cell.set_edgecolor("#c8d0da")
        cell.PAD = 0.03
        if row_index == 0:
            cell.set_facecolor(HEADER_COLOUR)
            cell.get_text().set_fontweight("bold")
        elif row_index % 2 == 0:
            cell.set_facecolor(STRIPE_COLOUR)
    return fig


def summary_table_png(rows: list[SummaryRow]) -> bytes:
    fig = summary_table_figure(rows)
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)
