"""A live view of a run: rollout step of N, last abs-diff, last reward, step time (rich)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.records.metric_names import ABS_DIFF, RAW_REWARD, STEP_TIME


class RunProgress:
    def __init__(self, run_id: str, total_steps: int | None, enabled: bool | None = None):
        console = Console(file=sys.stderr)
        self._enabled = console.is_terminal if enabled is None else enabled
        self._progress = Progress(
            TextColumn("[bold]{task.fields[run]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("abs-diff {task.fields[diff]}  reward {task.fields[reward]}  step {task.fields[step_time]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not self._enabled,
            transient=False,
        )
        self._task = self._progress.add_task("run", total=total_steps, run=run_id, diff="-", reward="-", step_time="-")
        self._steps: set[int] = set()

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def update(self, kind: str, n: int, metrics: dict) -> None:
        fields = {}
        if ABS_DIFF in metrics:
            fields["diff"] = f"{metrics[ABS_DIFF]:.3g}" if isinstance(metrics[ABS_DIFF], float) else str(metrics[ABS_DIFF])
        if RAW_REWARD in metrics:
            fields["reward"] = f"{metrics[RAW_REWARD]:.3f}" if isinstance(metrics[RAW_REWARD], float) else str(metrics[RAW_REWARD])
        if STEP_TIME in metrics and isinstance(metrics[STEP_TIME], (int, float)):
            fields["step_time"] = f"{metrics[STEP_TIME]:.2f}s"
        if kind == "step":
            self._steps.add(n)
            fields["completed"] = len(self._steps)
        self._progress.update(self._task, **fields)
