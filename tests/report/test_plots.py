"""Figures for the report: they show the run's data, labelled, and say when data is missing."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from runbuilder import PERF_PARTS, make_run, noisy, perf_series, resolved_spec

from harness.report.allure_attach import attach_plot
from harness.report.audit_plots import dlogp_histogram, worst_token_rows
from harness.report.plots import (
    PARENT_COLOUR,
    RUN_COLOUR,
    STEP_TIME_PARTS,
    abs_diff_figure,
    reward_figure,
    rung_figures,
    step_time_figure,
)
from harness.report.summary import SummaryRow
from harness.report.summary_figure import summary_table_figure, summary_table_png

STEPS = 10


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture()
def runs(tmp_path):
    parent = make_run(tmp_path, "p", resolved_spec("p1", "fp32-floor"), abs_diff=noisy(5e-7, STEPS, 1), reward=noisy(0.4, STEPS, 2))
    child = make_run(
        tmp_path, "c", resolved_spec("p1", "near-aligned"), abs_diff=noisy(0.0135, STEPS, 3), reward=noisy(0.41, STEPS, 4), perf=perf_series(STEPS, 5)
    )
    return parent, child


def _line(ax, colour, linestyle):
    return next(line for line in ax.get_lines() if line.get_color() == colour and line.get_linestyle() == linestyle)


def test_abs_diff_plot_overlays_the_parent_on_a_log_axis_when_scales_differ(runs):
    parent, child = runs
    ax = abs_diff_figure(child, parent, warmup=2).axes[0]
    own, theirs = _line(ax, RUN_COLOUR, "-"), _line(ax, PARENT_COLOUR, "--")
    assert list(own.get_ydata()) == [v for _, v in child.series("train/train_rollout_logprob_abs_diff")]
    assert list(theirs.get_ydata()) == [v for _, v in parent.series("train/train_rollout_logprob_abs_diff")]
    assert ax.get_yscale() == "log", "1e-2 over 5e-7 would be a flat line on a linear axis"
    assert "nats" in ax.get_ylabel() and ax.get_xlabel() == "rollout step"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "near-aligned (colocate)" in labels and "parent: fp32-floor (colocate)" in labels
    assert any(label.startswith("warm-up (2 steps") for label in labels)


def test_reward_plot_stays_linear_for_similar_scales(runs):
    parent, child = runs
    ax = reward_figure(child, parent).axes[0]
    assert ax.get_yscale() == "linear"
    assert any("mean after warm-up" in t.get_text() for t in ax.get_legend().get_texts())


def test_step_time_bars_stack_the_logged_parts(runs):
    _, child = runs
    ax = step_time_figure(child).axes[0]
    tops = np.zeros(STEPS)
    for name in PERF_PARTS:
        container = next(c for c in ax.containers if c.get_label() == STEP_TIME_PARTS[name][0])
        heights = np.array([bar.get_height() for bar in container])
        np.testing.assert_allclose(heights, [v for _, v in child.series(name)])
        np.testing.assert_allclose([bar.get_y() for bar in container], tops)
        tops += heights
    assert ax.get_ylabel() == "seconds"


def test_missing_metrics_are_said_on_the_figure(runs, tmp_path):
    parent, _ = runs
    figures = rung_figures(parent)  # the parent has no perf/* records
    texts = [t.get_text() for t in figures["step-time breakdown"].axes[0].texts]
    assert texts == ["no perf/* timings in this run's records"]
    bare = make_run(tmp_path, "bare", resolved_spec("p1", "near-aligned"), reward=[0.1, 0.2])
    texts = [t.get_text() for t in abs_diff_figure(bare).axes[0].texts]
    assert texts == ["no train/train_rollout_logprob_abs_diff in this run's records"]


def test_dlogp_histogram_marks_the_percentiles_of_the_data():
    rng = np.random.default_rng(0)
    dlogp = np.concatenate([rng.standard_t(3, 3000) * 0.01, [np.nan, 0.0]])
    fig = dlogp_histogram(dlogp)
    assert "3001 tokens, 1 non-finite left out" in fig._suptitle.get_text()
    absolute = fig.axes[1]
    labels = [t.get_text() for t in absolute.get_legend().get_texts()]
    finite = np.abs(dlogp[np.isfinite(dlogp)])
    assert f"p99 {np.percentile(finite, 99):.3g}" in labels and f"p50 {np.percentile(finite, 50):.3g}" in labels
    assert absolute.get_xscale() == "log" and "1 tokens with dlogp exactly 0" in absolute.get_title()


def test_worst_tokens_sorted_by_magnitude_with_known_columns_first():
    worst = [
        {"context": "a", "dlogp": 0.1, "position": 3},
        {"context": "b", "dlogp": -0.9, "position": 8},
        {"context": "c", "dlogp": 0.5, "position": 1, "expert_ids": np.array([1, 2])},
    ]
    rows = worst_token_rows(worst, limit=2)
    assert [r["position"] for r in rows] == [8, 1]
    assert list(rows[0])[:4] == ["rank", "abs_dlogp", "dlogp", "context"]
    assert rows[1]["expert_ids"] == [1, 2] and rows[1]["rank"] == 2
    columns = {"abs_dlogp": np.array([0.2, 0.7]), "token_text": ["x", "y"]}
    assert [r["token_text"] for r in worst_token_rows(columns)] == ["y", "x"]
    with pytest.raises(ValueError, match="different lengths"):
        worst_token_rows({"dlogp": [1.0, 2.0], "position": [1]})


def test_summary_figure_holds_every_cell():
    row = SummaryRow(
        run="candidate",
        hardware="8x NVIDIA GB200, 2 nodes",
        mode="non-colocate",
        precision="BF16 train + FP8 rollout",
        operator_path="default",
        abs_diff_mean=0.0123,
        abs_diff_ci=(0.011, 0.013),
        notes="compare against baseline",
    )
    fig = summary_table_figure([row])
    cells = fig.axes[0].tables[0].get_celld().values()
    texts = [cell.get_text().get_text().replace("\n", " ") for cell in cells]
    for value in ("candidate", "8x NVIDIA GB200, 2 nodes", "non-colocate", "0.0123", "[0.011, 0.013]"):
        assert any(value in text for text in texts), value
    assert summary_table_png([row]).startswith(b"\x89PNG")


def test_attach_plot_closes_the_figure():
    fig = plt.figure()
    attach_plot(fig, "nothing to attach to")
    assert fig.number not in plt.get_fignums()
