"""The runs a front end's checks ask for: a RunSource whose planned runs are made in the background.

A selection's checks ask for their runs one check at a time; asked in those pieces, runs launched
side by side wait for each other at every piece's end. So a front end hands the whole plan
(harness.experiment.plan) to `start_plan` first: the runs are launched on a thread of their own
(harness.launch.background.BackgroundBatch) while the checks that need no run are decided, and a
check that needs a planned run waits for that run only. While the batch runs this process computes
on one thread (a second one would spin at its barriers beside the runs).

Progress lines come from the batch's thread; only the caller's thread may write (pytest's capture
belongs to its main thread), so they queue until the caller drains them (`drain`, called between
checks and while waiting).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from harness.experiment.runs import Fetch, RunSource
from harness.spec import SpecError

Request = tuple[str, str, str, dict]


class Provision:
    """The face a Session asks for runs through (`backend`, `spec`, `__call__`, `many`, `fetcher`),
    over `source`; `write_line` shows a progress line to the user (from the caller's thread)."""

    def __init__(self, source: RunSource, write_line: Callable[[str], None] = print):
        self.source, self.write_line = source, write_line
        self.batch = None  # the planned runs' BackgroundBatch, once started
        self._lines: collections.deque[str] = collections.deque()
        self._told_error = False
        self._threads = None

    @property
    def backend(self) -> str:
        return self.source.backend

    @property
    def find_only(self) -> bool:
        return self.source.find_only

    @property
    def seed_offset(self) -> int:
        """The source's offset on every stage seed (a confirmatory sweep's): what a caller that names
        seeds itself (the drift budget's own seeds) adds."""
        return self.source.seed_offset

    def spec(self, stage: str, rung: str, mode: str, **overrides):
        return self.source.spec(stage, rung, mode, **overrides)

    def __call__(self, stage: str, rung: str, mode: str, **overrides):
        return self.many([(stage, rung, mode, overrides)])[0]

    def many(self, requests: list[Request]):
        """Several runs (RunSource.many, side by side); those the planned batch is making are waited for first."""
        if self.batch is not None:
            run_ids = [self.source.spec(stage, rung, mode, **overrides).run_id for stage, rung, mode, overrides in requests]
            self.batch.wait_for(run_ids, on_wait=self.drain)
            self.drain()
        return self.source.many(requests)

    def fetcher(self, stage: str, mode: str) -> Fetch:
        """rung_id, **overrides -> run at one stage and mode; `.many` launches several side by side."""
        return Fetch(self, stage, mode)

    def sink(self, line: str) -> None:
        """A progress line: written at once from the caller's thread, queued from the batch's."""
        if threading.current_thread() is threading.main_thread():
            self.write_line(line)
        else:
            self._lines.append(line)

    def start_plan(self, requests: list[Request]) -> None:
        """The planned runs, launched in the background. A planned run whose spec is refused is left to
        the check that asks for it, which fails with the reason. Nothing on a find-only source."""
        from harness.launch.background import BackgroundBatch, ComputingThreads

        if self.find_only:
            return
        planned, run_ids = [], []
        for stage, rung, mode, overrides in requests:
            try:
                run_ids.append(self.source.spec(stage, rung, mode, **overrides).run_id)
            except SpecError:
                continue
            planned.append((stage, rung, mode, overrides))
        if not planned:
            return
        self._threads = ComputingThreads().pin()
        self.batch = BackgroundBatch(run_ids, lambda cancel, on_ready: self.source.many(planned, cancel=cancel, on_ready=on_ready)).start()

    def between_checks(self) -> None:
        """Between two checks: the batch's lines, and this process's threads back once it is done."""
        if self.batch is None:
            return
        self.drain()
        if not self.batch.running and self._threads is not None:
            self._threads.restore()

    def stop_plan(self) -> None:
        """At the front end's end (Ctrl-C and SIGTERM included): stop what the batch still runs; each
        run keeps what it logged."""
        if self.batch is not None:
            self.batch.stop()
        if self._threads is not None:
            self._threads.restore()
        self.drain()

    def drain(self) -> None:
        """The queued progress lines; once, the error the batch ended with, if it ended with one."""
        while self._lines:
            self.write_line(self._lines.popleft())
        batch = self.batch
        if batch is not None and batch.error is not None and not self._told_error and not batch.cancel.is_set():
            self._told_error = True
            first = (str(batch.error).strip().splitlines() or [type(batch.error).__name__])[0]
            self.write_line(
                f"[runs] the planned batch ended with {type(batch.error).__name__}: {first}; a check that needs a run it did not make launches that run itself"
            )
