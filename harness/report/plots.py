"""Per-rung figures for the report: abs-diff and reward per step with the parent rung overlaid, and
the step-time breakdown. matplotlib's Agg backend only (no display); every figure has units, a
legend and the same colours throughout (this run blue, parent grey, warm-up shaded).

Each function takes loaded `Run`s (harness.records.runload) and returns a Figure; attach it with
harness.report.allure_attach.attach_plot, which closes it.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before pyplot: the report is drawn on machines without a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.records.metric_names import ABS_DIFF, RAW_REWARD, STEP_TIME

# The stacked parts of a step, in the order they happen in a VIME rollout step.
STEP_TIME_PARTS = {
    "perf/rollout_time": ("rollout (vLLM generate)", "#4c72b0"),
    "perf/log_probs_time": ("logprob recompute (Megatron)", "#dd8452"),
    "perf/update_weights_time": ("weight sync", "#55a868"),
    "perf/train_time": ("train", "#c44e52"),
}
RUN_COLOUR = "#1f5fa8"
PARENT_COLOUR = "#8c8c8c"
WARMUP_COLOUR = "#eeeeee"
FIGSIZE = (10.0, 4.2)
DPI = 110


def run_label(run) -> str:
    if run.spec.rung:
        return f"{run.spec.rung} ({run.spec.mode or '?'})"
    return run.id


def _series(run, name: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(step, value) for step, value in run.series(name) if isinstance(value, (int, float))]
    if not points:
        return np.array([], dtype=int), np.array([], dtype=float)
    steps, values = zip(*points)
    return np.asarray(steps), np.asarray(values, dtype=float)


def _new_axes(title: str, ylabel: str) -> tuple[Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("rollout step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _shade_warmup(ax, warmup: int, steps: np.ndarray) -> None:
    if warmup > 0 and len(steps):
        first = steps.min()
        ax.axvspan(first - 0.5, first + warmup - 0.5, color=WARMUP_COLOUR, zorder=0, label=f"warm-up ({warmup} steps, excluded from means)")


def _legend_outside(ax) -> None:
    # Beside the axes, never over the data (the layout engine makes room for it).
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _say_missing(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run's records", ha="center", va="center", transform=ax.transAxes, color="#a00000")


def series_with_parent(run, parent, metric: str, *, title: str, ylabel: str, warmup: int = 0) -> Figure:
    """One metric per step for the run, its parent overlaid, means after warm-up as dotted lines."""
    fig, ax = _new_axes(title, ylabel)
    steps, values = _series(run, metric)
    if not len(steps):
        _say_missing(ax, metric)
        return fig
    _shade_warmup(ax, warmup, steps)
    positive = list(values[values > 0])
    curves = [(run, RUN_COLOUR, "-", run_label(run))]
    if parent is not None:
        curves.append((parent, PARENT_COLOUR, "--", f"parent: {run_label(parent)}"))
    for source, colour, style, label in curves:
        s, v = (steps, values) if source is run else _series(source, metric)
        if not len(s):
            ax.plot([], [], color=colour, linestyle=style, label=f"{label}: no {metric}")
            continue
        ax.plot(s, v, color=colour, linestyle=style, marker="o", markersize=3, linewidth=1.4, label=label)
        after = v[warmup:][np.isfinite(v[warmup:])]
        if len(after):
            ax.axhline(after.mean(), color=colour, linestyle=":", linewidth=1, label=f"mean after warm-up {after.mean():.4g}")
        if source is not run:
            positive += list(v[v > 0])
    # Rungs span 1e-7 (fp32 floor) to 1e-1 nats: a linear axis would flatten the smaller curve.
    if positive and max(positive) / min(positive) > 100:
        ax.set_yscale("log")
    _legend_outside(ax)
    return fig


def abs_diff_figure(run, parent=None, *, warmup: int = 0) -> Figure:
    return series_with_parent(
        run,
        parent,
        ABS_DIFF,
        warmup=warmup,
        title=f"{run_label(run)}: train_rollout_logprob_abs_diff per step",
        ylabel="|trainer − rollout| logprob (nats, sample mean)",
    )


def reward_figure(run, parent=None, *, warmup: int = 0) -> Figure:
    return series_with_parent(
        run, parent, RAW_REWARD, warmup=warmup, title=f"{run_label(run)}: rollout/raw_reward per step", ylabel="raw reward (mean over samples)"
    )


def step_time_figure(run) -> Figure:
    """Stacked per-step time of rollout, logprob recompute, weight sync and train; perf/step_time
    drawn over it as the total, so time outside the four parts shows as the gap."""
    fig, ax = _new_axes(f"{run_label(run)}: step-time breakdown", "seconds")
    parts = {name: dict(zip(*_series(run, name))) for name in STEP_TIME_PARTS}
    steps = sorted(set().union(*(p.keys() for p in parts.values())))
    total_steps, totals = _series(run, STEP_TIME)
    if not steps and not len(total_steps):
        _say_missing(ax, "perf/* timings")
        return fig
    bottom = np.zeros(len(steps))
    for name, (label, colour) in STEP_TIME_PARTS.items():
        heights = np.array([parts[name].get(step, 0.0) for step in steps], dtype=float)
        if not parts[name]:
            label += " (not logged)"
        ax.bar(steps, heights, bottom=bottom, color=colour, width=0.8, label=label)
        bottom += np.nan_to_num(heights)
    if len(total_steps):
        ax.plot(
            total_steps, totals, color="black", marker="_", markersize=10, linestyle="none", label=f"perf/step_time (mean {np.nanmean(totals):.3g} s)"
        )
    _legend_outside(ax)
    return fig


def rung_figures(run, parent=None, *, warmup: int = 0) -> dict[str, Figure]:
    """The three per-rung plots, by attachment name."""
    return {
        "abs-diff per step (parent overlaid)": abs_diff_figure(run, parent, warmup=warmup),
        "raw reward per step (parent overlaid)": reward_figure(run, parent, warmup=warmup),
        "step-time breakdown": step_time_figure(run),
    }
