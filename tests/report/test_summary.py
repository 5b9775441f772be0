"""The summary table: what each column says about a run, computed from the run's own record."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from runbuilder import make_run, noisy, perf_series, resolved_spec

from harness.judge.stats import block_bootstrap_mean_ci
from harness.records.models import Failure
from harness.report.summary import (
    COLUMNS,
    CSV_COLUMNS,
    SummaryRow,
    describe_operator_path,
    describe_precision,
    render_csv,
    render_markdown,
    summary_row_from_run,
    write_summary,
)

STEPS = 12


@pytest.mark.parametrize(
    "stage, rung, expected, backend",
    [
        # fp32-floor is embedded-only: VIME trains in bf16 whatever the flags (ladder/fp32-floor.yaml on-vime).
        ("p1", "fp32-floor", "FP32 train + FP32 rollout", "embedded"),
        *[
            (stage, rung, expected, backend)
            for stage, rung, expected in (
                ("p1", "near-aligned", "BF16 train + BF16 rollout"),
                ("p1", "fp8-rollout", "BF16 train + FP8 rollout"),
                ("p3", "fp8-plus-filters", "BF16 train + FP8 rollout"),
            )
            for backend in ("embedded", "vime")
        ],
    ],
)
def test_precision_of_each_rung_follows_its_resolved_flags(stage, rung, expected, backend):
    # The embedded backend quantises with --vllm-quantization fp8; VIME with an FP8 checkpoint.
    flags = resolved_spec(stage, rung, backend=backend)["flags"]
    assert describe_precision(flags) == expected


def test_precision_reads_fp16_training_and_an_unstated_rollout_dtype():
    assert describe_precision({"fp16": True, "hf-checkpoint": "/ckpt/Qwen3-4B"}) == "FP16 train + checkpoint-dtype rollout"
    assert describe_precision({"bf16": "true", "vllm-dtype": "half"}) == "BF16 train + FP16 rollout"


def test_operator_path_names_the_candidate_and_what_actually_ran():
    baseline = resolved_spec("p3", "fp8-plus-filters")["flags"]
    candidate = resolved_spec("p3", "candidate-operator")["flags"]
    assert describe_operator_path(baseline) == "default"
    assert describe_operator_path(candidate).startswith("embedded-logprob-operator=fused-linear-logprob")
    assert describe_operator_path({"rl-kernel-linear-logp-backend": "fused"}) == "rl-kernel-linear-logp-backend=fused"

    ran = [{"requested_backend": "fused", "actual_backend": "fused", "decision": "optimized"}] * 3
    fell_back = {
        "requested_backend": "fused",
        "actual_backend": "native",
        "decision": "fallback-native",
        "fallback_reason": "vocab size not divisible by 128",
    }
    clean = describe_operator_path(candidate, ran)
    assert "fused (optimized) x3" in clean and "FALLBACK" not in clean
    hidden = describe_operator_path(candidate, ran + [fell_back])
    assert "FALLBACK 1/4: vocab size not divisible by 128" in hidden
    assert "no execution decision records" in describe_operator_path(candidate, [])


def test_row_figures_come_from_the_run_series(tmp_path, knobs):
    warmup = int(knobs.threshold("warmup_steps"))
    window = int(knobs.threshold("reward_window_steps"))
    parent_diff, diff = noisy(0.0135, STEPS, 1), noisy(0.031, STEPS, 2)
    reward, perf = noisy(0.4, STEPS, 3), perf_series(STEPS, 4)
    parent = make_run(tmp_path, "parent", resolved_spec("p1", "near-aligned"), abs_diff=parent_diff)
    run = make_run(tmp_path, "child", resolved_spec("p1", "fp8-rollout"), abs_diff=diff, reward=reward, perf=perf)

    row = summary_row_from_run(run, "fp8-rollout", parent=parent, knobs=knobs)

    assert row.run == "fp8-rollout" and row.run_id == "child" and row.mode == "colocate"
    assert row.precision == "BF16 train + FP8 rollout" and row.operator_path == "default"
    assert row.hardware == "CPU: Test CPU, 2 cores (no GPU)"
    assert row.abs_diff_mean == pytest.approx(np.mean(diff[warmup:]))
    assert row.abs_diff_ci == pytest.approx(block_bootstrap_mean_ci(diff[warmup:]))
    assert row.abs_diff_ci[0] < row.abs_diff_mean < row.abs_diff_ci[1]
    assert row.final_reward == pytest.approx(np.mean(reward[-window:]))
    assert row.step_time_mean == pytest.approx(np.mean(perf["perf/step_time"][warmup:]))
    assert row.delta_vs_parent == pytest.approx(np.mean(diff[warmup:]) - np.mean(parent_diff[warmup:]))
    assert row.delta_ci[0] > 0, "a 2x rise in abs-diff must give an interval above zero"
    assert row.steps_used == STEPS - warmup
    assert "vs near-aligned" in row.notes


def test_row_of_a_failed_run_says_so_and_keeps_what_it_has(tmp_path, knobs):
    failure = Failure(signature="cuda-oom", line=7, text="torch.OutOfMemoryError: CUDA out of memory")
    run = make_run(
        tmp_path, "died", resolved_spec("p1", "near-aligned"), abs_diff=[0.01, float("nan"), 0.012, 0.011, 0.013], state="failed", failure=failure
    )
    row = summary_row_from_run(run, knobs=knobs)
    assert row.run == "died"
    assert "run failed: cuda-oom at log line 7" in row.notes
    warmup = int(knobs.threshold("warmup_steps"))
    finite_after = [v for v in [0.01, float("nan"), 0.012, 0.011, 0.013][warmup:] if v == v]
    assert row.abs_diff_mean == pytest.approx(np.mean(finite_after))
    assert row.final_reward is None and row.step_time_mean is None
    assert row.display()["Final Reward"] == "—" and row.display()["Step Time Mean"] == "—"


def test_row_without_the_metric_says_what_is_missing(tmp_path, knobs):
    run = make_run(tmp_path, "empty", resolved_spec("p1", "near-aligned"), reward=[0.1, 0.2], environment=None)
    row = summary_row_from_run(run, knobs=knobs)
    assert row.abs_diff_mean is None and row.abs_diff_ci is None
    assert "no train/train_rollout_logprob_abs_diff" in row.notes
    assert row.hardware == "not recorded"


def _rows(tmp_path, knobs) -> list[SummaryRow]:
    base = make_run(
        tmp_path,
        "base",
        resolved_spec("p3", "fp8-plus-filters"),
        abs_diff=noisy(0.02, STEPS, 5),
        reward=noisy(0.3, STEPS, 6),
        perf=perf_series(STEPS, 7),
    )
    cand = make_run(
        tmp_path,
        "cand",
        resolved_spec("p3", "candidate-operator"),
        abs_diff=noisy(0.012, STEPS, 8),
        reward=noisy(0.31, STEPS, 9),
        perf=perf_series(STEPS, 10),
    )
    return [
        summary_row_from_run(base, "baseline", notes="mismatch | baseline", knobs=knobs),
        summary_row_from_run(cand, "candidate", parent=base, knobs=knobs),
    ]


def test_write_summary_markdown_and_csv(tmp_path, knobs):
    rows = _rows(tmp_path / "runs", knobs)
    md_path, csv_path = write_summary(rows, tmp_path / "reports")
    markdown = md_path.read_text()
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert table[0] == "| " + " | ".join(COLUMNS) + " |"
    assert len(table) == 2 + len(rows)
    assert "mismatch \\| baseline" in table[2], "a pipe inside a cell must not split the row"
    assert "embedded-logprob-operator=fused-linear-logprob" in table[3]

    parsed = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert list(parsed[0]) == list(CSV_COLUMNS)
    for row, written in zip(rows, parsed):
        assert float(written["logprob_abs_diff Mean"]) == row.abs_diff_mean  # full precision, not the 4 digits shown
        assert written["Run ID"] == row.run_id
    assert parsed[0]["Δ vs parent"] == "" and float(parsed[1]["Δ vs parent"]) == rows[1].delta_vs_parent


def test_rows_round_trip_through_dicts_for_xdist(tmp_path, knobs):
    rows = _rows(tmp_path, knobs)
    again = [SummaryRow.from_dict(row.to_dict()) for row in rows]
    assert again == rows
    assert render_markdown(again) == render_markdown(rows) and render_csv(again) == render_csv(rows)
