"""A run's progress: rollout i of N, its ETA, last abs-diff, last reward, step time.

On a terminal a rich progress bar; elsewhere (a CI log, a file) one plain line per run at most every
LINE_EVERY_S seconds, so a 100-rollout run still says where it is. `eta_s` is shared with
`python -m harness status`.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.records.metric_names import ABS_DIFF, RAW_REWARD, STEP_TIME

LINE_EVERY_S = 30.0


def eta_s(started: float, done: int, total: int | None, now: float | None = None) -> float | None:
    """Seconds left if the remaining rollouts take as long as the done ones did on average
    (start-up included, so an early estimate errs long); None before the first rollout."""
    if not total or done <= 0:
        return None
    elapsed = (now if now is not None else time.time()) - started
    return max(0.0, elapsed / done * (total - done))


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA unknown"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA {minutes}:{secs:02d}"


class RunProgress:
    def __init__(self, run_id: str, total_steps: int | None, enabled: bool | None = None, started: float | None = None, sink=None):
        """enabled: the bar (None: on a terminal). sink: where plain lines go instead of stderr (the
        pytest plugin's terminal writer); with a sink, lines are written whatever `enabled` says."""
        console = Console(file=sys.stderr)
        self._run_id, self._total = run_id, total_steps
        self._bar = console.is_terminal if enabled is None else enabled
        # Plain lines where nobody chose and no bar shows, or where a front end asked for them.
        self._lines = sink is not None or (enabled is None and not console.is_terminal)
        self._sink = sink or (lambda line: print(line, file=sys.stderr, flush=True))
        self._started = started if started is not None else time.time()
        self._last_line = 0.0
        self._progress = Progress(
            TextColumn("[bold]{task.fields[run]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("abs-diff {task.fields[diff]}  reward {task.fields[reward]}  step {task.fields[step_time]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not self._bar,
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
            self._line(n)
        self._progress.update(self._task, **fields)

    def _line(self, n: int) -> None:
        now = time.time()
        if not self._lines or now - self._last_line < LINE_EVERY_S:
            return
        self._last_line = now
        total = self._total if self._total else "?"
        eta = format_eta(eta_s(self._started, len(self._steps), self._total, now))
        self._sink(f"{self._run_id}: rollout {n + 1}/{total}, {eta}")
