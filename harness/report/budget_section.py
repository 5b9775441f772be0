"""Where the drift lives, on the experiment page: each budget rung's drift budget by intervention.

    budget_figure(entry) -> matplotlib Figure   boundary x share for one rung: add-one and
                                                leave-one-out shares with their intervals, the
                                                pre-registered share drawn across
    budget_section(record) -> str               the page's section: one figure and one table a rung,
                                                the verdict and the interaction stated

Entries are the record's `budgets` (harness.judge.budget.RungBudget.as_dict in each entry's data).
"""

from __future__ import annotations

import html
import io
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from harness.report.record_model import DriftBudget, ExperimentRecord  # noqa: E402

ADD, LOO = "#1f5fa8", "#e07b00"


def _estimate(data: dict | None) -> tuple[float, float, float] | None:
    if not data:
        return None
    return data["value"], data["value"] - data["low"], data["high"] - data["value"]


def budget_figure(entry: DriftBudget):
    """Boundary (one row per lever, in the forward's order) x share of the rung's drift."""
    rows = entry.data.get("levers") or []
    fig, ax = plt.subplots(figsize=(7.6, 0.28 * len(rows) + 1.4))
    for y, row in enumerate(rows):
        for offset, key, colour, label in (
            (-0.18, "add_one", ADD, "add-one (this lever alone)"),
            (0.18, "leave_one_out", LOO, "leave-one-out (all but this)"),
        ):
            est = _estimate(row.get(key))
            if est is None:
                continue
            value, below, above = est
            ax.barh(y + offset, value, height=0.34, color=colour, alpha=0.85, label=label if y == 0 or (key == "leave_one_out" and y == 1) else None)
            ax.errorbar(value, y + offset, xerr=[[below], [above]], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    ax.set_yticks(range(len(rows)), [row["lever"] + (" (contract)" if row["kind"] == "contract" else "") for row in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(entry.data.get("min_localised_share", 0.5), color="#c0392b", ls="--", lw=1, label="pre-registered share")
    ax.axvline(0, color="#555555", lw=0.6)
    ax.set_xlabel("share of the rung's drift (mean |trainer - rollout| on its own tokens)", fontsize=8)
    ax.set_title(f"{entry.rung}: {entry.verdict}" + (f" to {entry.boundary}" if entry.boundary else ""), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _svg(fig) -> str:
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "budget"}):
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    return re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 class="budget" role="img" aria-label="drift budget"', svg, count=1)


def _pct(data: dict | None) -> str:
    if not data:
        return "—"
    return f"{data['value']:+.1%} [{data['low']:+.1%}, {data['high']:+.1%}]"


def _table(entry: DriftBudget) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("lever", "boundary", "side", "add-one", "leave-one-out", "interaction (LOO - add)", "localised?"))
    body = []
    for row in entry.data.get("levers") or []:
        cells = [row["lever"], row["boundary"], row["side"], _pct(row["add_one"]), _pct(row["leave_one_out"]), _pct(row["interaction"])]
        verdict = row["localisation"] or ("contract: never an operator answer" if row["kind"] == "contract" else "—")
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in [*cells, verdict]) + "</tr>")
    return f"<table class='budget'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _lead(entry: DriftBudget) -> str:
    data = entry.data
    if not data:
        return f"<p><b>{html.escape(entry.rung)}</b>: not measured: {html.escape(entry.reason)}</p>"
    residual = data["residual_all_levers"]
    return (
        f"<p><b>{html.escape(entry.rung)}</b>: {html.escape(entry.reason)}. Drift {data['drift']:.3g} (SE {data['drift_se']:.2g}) over "
        f"{len(data['seeds'])} seeds, {data['sequences']} sequences, {data['tokens']} tokens; every operator lever together leaves "
        f"{_pct(residual)}. Leave-one-out shares add to more than 100% where rounding decorrelates after the first differing "
        "boundary: the interaction column is that difference, per lever.</p>"
    )


def budget_section(record: ExperimentRecord) -> str:
    if not record.budgets:
        return "<h2>Where the drift lives (drift budget)</h2><p class='none'>no drift budget in this record</p>"
    parts = [
        "<h2>Where the drift lives (drift budget)</h2><p class='small'>Each lever aligns one boundary of the forward on both "
        "engines; the rung's own sampled tokens are re-scored at the weights they were sampled with, each lever alone (add-one) "
        "and all but it (leave-one-out). A rung's drift is localised to a boundary when aligning it alone removes the "
        "pre-registered share at the required margin (knobs/levers.yaml).</p>"
    ]
    for entry in record.budgets:
        parts.append(_lead(entry))
        if entry.data:
            parts.append(_svg(budget_figure(entry)))
            parts.append(_table(entry))
    return "<section id='budget'>" + "".join(parts) + "</section>"
