"""The ladder in one picture, for the experiment page: abs-diff mean per rung with its interval,
coloured by the class the judge decided, each rung joined to its parent, the fp32 and
near-aligned floors drawn across, on a log axis (rungs span 1e-7 to 1e-1 nats).

    ladder_svg(record, baseline=None) -> str   an inline <svg> (matplotlib, text kept as text)

Points come from the record's rungs; the A/B pair (summary rows of kind ab-baseline /
ab-candidate) is drawn the same way, its candidate joined to its baseline. With a baseline
record (--compare) the baseline's points are drawn hollow beside the candidate's.
"""

from __future__ import annotations

import io
import math
import re

import matplotlib

matplotlib.use("Agg")  # before pyplot: the page is drawn on machines without a display

import matplotlib.pyplot as plt  # noqa: E402

from harness.report.record_model import ExperimentRecord  # noqa: E402

CLASS_COLOURS = {
    "none": "#6b8e23",
    "expected-numerical": "#1f5fa8",
    "semantic": "#8e44ad",
    "candidate-operator": "#e07b00",
    "framework": "#c0392b",
    "A/B": "#138d90",
}
FLOOR_RUNGS = {"fp32-floor": ("fp32 floor", "#555555", ":"), "near-aligned": ("near-aligned floor", "#999999", "--")}
FIGSIZE = (7.6, 3.3)  # short enough that the figure ends on the first screen under a 10-row table


def ladder_points(record: ExperimentRecord) -> list[dict]:
    """One point per judged rung, then the A/B pair; each {key, label, mean, ci, parent_key, class}."""
    points = []
    for rung in record.rungs:
        stage = rung.stage
        points.append(
            {
                "key": f"{stage}:{rung.rung}",
                "label": rung.rung if _one_stage(record) else f"{stage}:{rung.rung}",
                "mean": rung.mean,
                "ci": rung.ci,
                "parent_key": f"{stage}:{rung.parent}" if rung.parent else None,
                "class": rung.decided_class or "none",
            }
        )
    for row in record.rows:
        if row.kind in ("ab-baseline", "ab-candidate"):
            baseline_label = row.run.replace("candidate", "baseline")
            points.append(
                {
                    "key": row.run,
                    "label": row.run,
                    "mean": row.abs_diff_mean,
                    "ci": row.abs_diff_ci,
                    "parent_key": baseline_label if row.kind == "ab-candidate" else None,
                    "class": "A/B",
                }
            )
    return _ordered(points)


def _one_stage(record: ExperimentRecord) -> bool:
    return len({r.stage for r in record.rungs}) <= 1


def _ordered(points: list[dict]) -> list[dict]:
    """Parents before children (depth first from each root), the record's order otherwise."""
    by_parent: dict = {}
    keys = {p["key"] for p in points}
    for point in points:
        by_parent.setdefault(point["parent_key"] if point["parent_key"] in keys else None, []).append(point)
    ordered: list[dict] = []

    def walk(parent_key):
        for point in by_parent.get(parent_key, []):
            if point not in ordered:
                ordered.append(point)
                walk(point["key"])

    walk(None)
    return ordered + [p for p in points if p not in ordered]


def _usable(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def ladder_svg(record: ExperimentRecord, baseline: ExperimentRecord | None = None) -> str:
    points = ladder_points(record)
    fig, ax = plt.subplots(figsize=FIGSIZE, layout="constrained")
    ax.set_ylabel("abs-diff mean (nats, log)")
    ax.grid(True, axis="y", which="both", alpha=0.25)
    drawn = [p for p in points if _usable(p["mean"])]
    if not drawn:
        ax.text(0.5, 0.5, "no rung with a positive abs-diff mean in this record", ha="center", va="center", transform=ax.transAxes, color="#a00000")
        ax.set_xticks([])
        return _to_svg(fig)
    x_of = {p["key"]: i for i, p in enumerate(drawn)}
    _draw_floors(ax, drawn)
    first_ab = next((i for i, p in enumerate(drawn) if p["class"] == "A/B"), 0)
    if first_ab:  # the A/B pair is its own comparison, not a rung of the ladder
        ax.axvline(first_ab - 0.5, color="#cccccc", linewidth=1, linestyle="-", zorder=0)
    base_points = {p["key"]: p for p in ladder_points(baseline)} if baseline else {}
    offset = 0.15 if base_points else 0.0  # the candidate's points right of the baseline record's
    for point in drawn:  # parent links under the points
        parent = point["parent_key"]
        if parent in x_of:
            ax.annotate(
                "",
                xy=(x_of[point["key"]] + offset, point["mean"]),
                xytext=(x_of[parent] + offset, drawn[x_of[parent]]["mean"]),
                arrowprops={"arrowstyle": "->", "color": "#b0b0b0", "lw": 1.0, "shrinkA": 4, "shrinkB": 5},
                zorder=1,
            )
    seen_classes = []
    for point in drawn:
        x, colour = x_of[point["key"]], CLASS_COLOURS.get(point["class"], "#333333")
        _point(ax, x + offset, point, colour, filled=True)
        if point["class"] not in seen_classes:
            seen_classes.append(point["class"])
        other = base_points.get(point["key"])
        if other and _usable(other["mean"]):
            _point(ax, x - offset, other, CLASS_COLOURS.get(other["class"], "#333333"), filled=False)
    for cls in seen_classes:
        ax.plot([], [], "o", color=CLASS_COLOURS.get(cls, "#333333"), label=cls if cls == "A/B" else f"class: {cls}")
    if base_points:
        ax.plot([], [], "o", mfc="white", color="#333333", label="baseline record (hollow)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(drawn)), [p["label"] for p in drawn], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(drawn) - 0.4)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    return _to_svg(fig)


def _point(ax, x: float, point: dict, colour: str, *, filled: bool) -> None:
    mean, ci = point["mean"], point.get("ci")
    if ci and all(_usable(v) for v in ci):
        ax.errorbar([x], [mean], yerr=[[mean - min(ci[0], mean)], [max(ci[1], mean) - mean]], fmt="none", ecolor=colour, elinewidth=1.4, capsize=4)
    ax.plot([x], [mean], "o", markersize=7, color=colour, mfc=colour if filled else "white", mew=1.5, zorder=3)


def _draw_floors(ax, drawn: list[dict]) -> None:
    for point in drawn:
        rung = point["key"].split(":", 1)[-1]
        if rung in FLOOR_RUNGS and point["class"] != "A/B":
            label, colour, style = FLOOR_RUNGS[rung]
            ax.axhline(point["mean"], color=colour, linestyle=style, linewidth=1, zorder=0, label=f"{label} {point['mean']:.3g}")


def _to_svg(fig) -> str:
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ladder"}):  # text stays text; stable ids
        fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prologue and DOCTYPE: the SVG sits inside HTML
    # Scale with the column it sits in; the viewBox keeps the drawing's proportions.
    return re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 class="ladder" role="img" aria-label="ladder figure"', svg, count=1)
