"""Several runs at once: the runs one check needs (a rung's seeds and its parent's, the A/B's pairs)
launched side by side, as many at a time as the machine has slots for (knobs/launch.yaml: parallel).

A run's numbers do not depend on this: every embedded process computes on one thread
(harness.embedded.threads), so a run alone and a run beside others do the same arithmetic.
Stopping the launcher (Ctrl-C, SIGTERM) stops every run it started here, each keeping what it
logged, as a run launched alone does (harness.launch.runner.Cancelled).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from harness.spec import backends

T = TypeVar("T")
WAIT_SECONDS = 0.5  # how often the main thread wakes while it waits, so Ctrl-C reaches it at once


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_memory_gib() -> float | None:
    """MemAvailable from /proc/meminfo, in GiB; None where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


def slots(knobs, backend: str, requested: int | None = None) -> tuple[int, str]:
    """(how many runs at once, why): `requested` (--parallel-runs) first, else knobs/launch.yaml."""
    if requested is not None:
        return max(1, int(requested)), f"--parallel-runs {requested}"
    parallel = getattr(knobs.budgets, "parallel", None) if knobs.budgets is not None else None
    if parallel is None:
        return 1, "no parallel section in launch.yaml"
    return backends.backend(backend).slots(parallel, cores=usable_cores(), memory_gib=available_memory_gib())


def run_all(
    tasks: Sequence[Callable[[threading.Event | None], T]],
    slots: int,
    on_done: Callable[[int, BaseException | None], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[T]:
    """Each task's result, in order; task(cancel) launches one run and stops it when cancel is set.

    With one slot (or one task) the tasks run here, one after another. Otherwise they run on
    `slots` threads; every task is waited for, then the first failure in task order is raised. A
    KeyboardInterrupt (Ctrl-C, or harness.launch.runner.Terminated for SIGTERM/SIGHUP) sets cancel,
    waits for the running tasks to stop and record their runs, and goes on to the caller.
    `on_done(index, error)` is called here, in the caller's thread, as each task ends (error None
    when it returned), for a progress line. `cancel`, when given, is the caller's: setting it from
    another thread stops the batch as Ctrl-C does (harness.launch.background: a batch on a thread
    of its own, which receives no signals), and run_all raises Cancelled."""
    from harness.launch.runner import Cancelled, signals_raise

    report = on_done or (lambda index, error: None)
    outside = cancel
    cancel = cancel or threading.Event()
    if slots <= 1 or len(tasks) <= 1:
        results = []
        for index, task in enumerate(tasks):
            if cancel.is_set():
                raise Cancelled()
            results.append(task(outside))
            report(index, None)
        return results
    pool = ThreadPoolExecutor(max_workers=min(slots, len(tasks)), thread_name_prefix="run")
    futures = [pool.submit(task, cancel) for task in tasks]
    try:
        with signals_raise():
            pending = set(futures)
            while pending:
                if cancel.is_set():
                    raise Cancelled()
                done, pending = wait(pending, timeout=WAIT_SECONDS)
                for future in sorted(done, key=futures.index):
                    report(futures.index(future), future.exception())
    except BaseException:
        cancel.set()
        for future in futures:
            future.cancel()  # not started yet: never started
        pool.shutdown(wait=True)  # started: each stops its trainer and records the run
        raise
    pool.shutdown(wait=True)
    return [future.result() for future in futures]
