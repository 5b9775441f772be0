"""The seed's summary table: one row per run, in reports/summary.md, reports/summary.csv and Allure.

Columns are the seed's (Run, Hardware, Mode, Precision, Operator Path, Final Reward,
logprob_abs_diff Mean, Step Time Mean, Notes) plus the two a reviewer needs to trust a
difference: the abs-diff mean's 95% interval and the delta against the parent run with its
interval. Figures are computed from the run's own metric series; precision and operator path are
derived from its resolved flags, so the table cannot disagree with what was launched.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.judge.verdict import after_warmup, finite_values
from harness.records.metric_names import ABS_DIFF, RAW_REWARD, STEP_TIME
from harness.report.flags import describe_hardware, describe_operator_path, describe_precision
from harness.report.tables import format_cell, to_csv, to_markdown
from harness.spec import backends
from harness.spec.flag_read import is_on

# The seed's own columns, in its order ("Suggested summary table"); every table of runs starts with them.
SEED_COLUMNS = ("Run", "Hardware", "Mode", "Precision", "Operator Path", "Final Reward", "logprob_abs_diff Mean")
COLUMNS = (
    *SEED_COLUMNS,
    "abs_diff 95% CI",
    "Δ vs parent",
    "Step Time Mean",
    "Notes",
)
CSV_COLUMNS = (
    SEED_COLUMNS[0],
    "Run ID",
    "Run Directory",
    *SEED_COLUMNS[1:],
    "abs_diff CI Low",
    "abs_diff CI High",
    "Δ vs parent",
    "Δ CI Low",
    "Δ CI High",
    "Step Time Mean (s)",
    "Steps Used",
    "Notes",
)

LEGEND = """\
- **logprob_abs_diff Mean**: mean of train/train_rollout_logprob_abs_diff (VIME's per-sample token mean,
  averaged over samples; nats) over the logged steps after the warm-up (knobs/thresholds.yaml: warmup_steps).
- **abs_diff 95% CI**: circular block bootstrap over steps (harness/judge/stats.py).
- **Δ vs parent**: this run's abs-diff mean minus its parent's (the parent rung, or the baseline for a
  candidate), with its 95% interval.
- **Final Reward**: mean rollout/raw_reward over the last reward_window_steps steps (knobs/thresholds.yaml).
- **Step Time Mean**: perf/step_time after the warm-up, seconds.
- **Hardware**: the machine the run used (its environment record), not the stage's target hardware.
"""
TITLE = "Summary: baseline and candidate runs"


@dataclass
class SummaryRow:
    run: str
    hardware: str
    mode: str
    precision: str
    operator_path: str
    final_reward: float | None = None
    abs_diff_mean: float | None = None
    abs_diff_ci: tuple[float, float] | None = None
    delta_vs_parent: float | None = None
    delta_ci: tuple[float, float] | None = None
    step_time_mean: float | None = None
    notes: str = ""
    run_id: str = ""
    run_dir: str = ""
    steps_used: int = 0

    def display(self) -> dict[str, str]:
        """Cells as shown in Markdown and HTML ('—' where a figure is missing)."""

        def interval(ci, signed=False):
            if ci is None:
                return "—"
            spec = "+.4g" if signed else ".4g"
            return f"[{ci[0]:{spec}}, {ci[1]:{spec}}]"

        return {
            "Run": self.run,
            "Hardware": self.hardware,
            "Mode": self.mode,
            "Precision": self.precision,
            "Operator Path": self.operator_path,
            "Final Reward": _figure(self.final_reward, ".3f"),
            "logprob_abs_diff Mean": _figure(self.abs_diff_mean, ".4g"),
            "abs_diff 95% CI": interval(self.abs_diff_ci),
            "Δ vs parent": "—" if self.delta_vs_parent is None else f"{self.delta_vs_parent:+.4g} {interval(self.delta_ci, signed=True)}",
            "Step Time Mean": "—" if self.step_time_mean is None else f"{self.step_time_mean:.3g} s",
            "Notes": self.notes,
        }

    def raw(self) -> dict:
        """Cells for the CSV: full-precision numbers, empty where missing."""
        ci = self.abs_diff_ci or (None, None)
        dci = self.delta_ci or (None, None)
        return {
            "Run": self.run,
            "Run ID": self.run_id,
            "Run Directory": self.run_dir,
            "Hardware": self.hardware,
            "Mode": self.mode,
            "Precision": self.precision,
            "Operator Path": self.operator_path,
            "Final Reward": self.final_reward,
            "logprob_abs_diff Mean": self.abs_diff_mean,
            "abs_diff CI Low": ci[0],
            "abs_diff CI High": ci[1],
            "Δ vs parent": self.delta_vs_parent,
            "Δ CI Low": dci[0],
            "Δ CI High": dci[1],
            "Step Time Mean (s)": self.step_time_mean,
            "Steps Used": self.steps_used,
            "Notes": self.notes,
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SummaryRow:
        data = dict(data)
        for key in ("abs_diff_ci", "delta_ci"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)


def _figure(value: float | None, spec: str) -> str:
    if value is None:
        return "—"
    return format_cell(value) if not math.isfinite(value) else f"{value:{spec}}"


def _values_after(run, name: str, warmup: int) -> tuple[np.ndarray, int]:
    """Finite values of a metric after the judge's warm-up rule (harness.judge.verdict.after_warmup),
    and how many non-finite ones after the warm-up were left out."""
    series = run.series(name)
    _, values = after_warmup(series, warmup)
    finite_steps, _, bad = finite_values(series)
    first = min(finite_steps) + warmup if finite_steps else None
    return np.asarray(values, dtype=float), sum(1 for step in bad if first is None or step >= first)


def summary_row_from_run(
    run, label: str | None = None, *, knobs, parent=None, notes: str = "", execution_decisions: list[dict] | None = None
) -> SummaryRow:
    """One table row from a loaded `Run` (harness.records.runload); `parent` is the run it is
    compared with (its parent rung, or the baseline for a candidate). The loaded `knobs` supply the
    warm-up, the reward window and the confidence level (knobs/thresholds.yaml), as they do the judge's."""
    from harness.judge.stats import block_bootstrap_diff_ci, block_bootstrap_mean_ci

    warmup, reward_window = int(knobs.threshold("warmup_steps")), int(knobs.threshold("reward_window_steps"))
    confidence = knobs.threshold("bootstrap_confidence")
    flags = run.spec.flags
    mode = run.spec.mode or ("colocate" if is_on(flags, "colocate") else "non-colocate")
    remarks = [notes] if notes else []

    abs_diff, dropped = _values_after(run, ABS_DIFF, warmup)
    if dropped:
        remarks.append(f"{dropped} non-finite abs-diff step(s) left out")
    if not len(abs_diff):
        remarks.append(f"no {ABS_DIFF} after the {warmup}-step warm-up")
    abs_ci = block_bootstrap_mean_ci(abs_diff, confidence=confidence) if len(abs_diff) >= 2 else None

    delta = delta_ci = None
    if parent is not None:
        parent_values, _ = _values_after(parent, ABS_DIFF, warmup)
        if len(parent_values) >= 2 and len(abs_diff) >= 2:
            diff = block_bootstrap_diff_ci(parent_values, abs_diff, confidence=confidence)
            delta, delta_ci = diff.diff, (diff.low, diff.high)
        remarks.append(f"vs {parent.spec.rung or parent.id}")

    rewards, _ = _values_after(run, RAW_REWARD, 0)
    step_times, _ = _values_after(run, STEP_TIME, warmup)
    status = run.status
    if status is None:
        remarks.append("no status.json")
    elif status.state != "finished":
        failure = f": {status.failure.signature} at log line {status.failure.line}" if status.failure else ""
        remarks.append(f"run {status.state}{failure}")
    if run.problems:
        remarks.append(f"{len(run.problems)} record problem(s): {run.problems[0]}")

    return SummaryRow(
        run=label or run.id,
        hardware=describe_hardware(run.environment, run.ingest),
        mode=mode,
        precision=describe_precision(
            flags,
            (run.environment or {}).get("checkpoint") or (run.ingest or {}).get("checkpoint"),
            vime=not getattr(backends.of_run(run.spec.backend), "trainer_in_repo", True),
        ),
        operator_path=describe_operator_path(flags, execution_decisions),
        final_reward=float(rewards[-reward_window:].mean()) if len(rewards) else None,
        abs_diff_mean=float(abs_diff.mean()) if len(abs_diff) else None,
        abs_diff_ci=abs_ci,
        delta_vs_parent=delta,
        delta_ci=delta_ci,
        step_time_mean=float(step_times.mean()) if len(step_times) else None,
        notes="; ".join(remarks),
        run_id=run.id,
        run_dir=str(run.path),
        steps_used=int(len(abs_diff)),
    )


def render_markdown(rows: list[SummaryRow]) -> str:
    return f"# {TITLE}\n\n" + to_markdown([r.display() for r in rows], COLUMNS) + "\n" + LEGEND


def render_csv(rows: list[SummaryRow]) -> str:
    return to_csv([r.raw() for r in rows], CSV_COLUMNS)


def write_summary(rows: list[SummaryRow], reports_dir: str | Path, answers_markdown: str = "") -> tuple[Path, Path]:
    """Write summary.md (the rows' table, then the judged answers with their margins when given) and
    summary.csv into `reports_dir` (atomically); returns their paths."""
    from harness.records.atomic import atomic_write_text

    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = reports_dir / "summary.md", reports_dir / "summary.csv"
    atomic_write_text(md_path, render_markdown(rows) + ("\n" + answers_markdown if answers_markdown else ""))
    atomic_write_text(csv_path, render_csv(rows))
    return md_path, csv_path
