"""A batch of runs made on a thread of its own while its caller goes on.

The pytest session's plan (fixtures/runs.py) is the user: every run the selected ladder family
and A/B gate will ask for is launched here at the session's start, and the checks that need no
run are judged meanwhile, on the cores the runs leave. A check that needs a planned run waits for
that run, not for the whole batch. Without this the session's test bodies and its runs took turns,
and one core sat idle while the bodies ran.

Signals reach only the main thread: the caller stops the batch with `stop()` (the pytest plugin
does at the session's end, Ctrl-C included), and every run it started stops and keeps what it
logged, as in harness.launch.parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

WAIT_SECONDS = 0.5  # how often a waiting caller wakes, so Ctrl-C reaches it at once


class BackgroundBatch:
    """`launch(cancel, on_ready)` run on a thread; `run_ids` are the runs it will make ready.

    `launch` is RunSource.many with the batch's requests bound: it calls on_ready(run_id) as each
    run is on disk and stops when cancel is set. A failure in the batch is kept (`error`) and every
    waiter released: a check that asks for a run the batch could not make launches it itself and
    fails with the reason, as it would have without the batch."""

    def __init__(self, run_ids: list[str], launch: Callable[[threading.Event, Callable[[str], None]], object]):
        self.cancel = threading.Event()
        self.error: BaseException | None = None
        self._pending = set(run_ids)
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._work, args=(launch,), name="planned-runs", daemon=True)

    def start(self) -> BackgroundBatch:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_for(self, run_ids, on_wait: Callable[[], None] | None = None) -> None:
        """Return once none of run_ids is still to be made by the batch (made, failed, or the batch
        stopped). `on_wait` is called each time the caller wakes (the plugin prints progress there)."""
        wanted = set(run_ids)
        while True:
            with self._changed:
                if not (self._pending & wanted and self._thread.is_alive()):
                    return
                self._changed.wait(WAIT_SECONDS)
            if on_wait is not None:
                on_wait()

    def stop(self) -> None:
        """Stop every run the batch started (each keeps what it logged) and wait for them."""
        self.cancel.set()
        if self._thread.is_alive():
            self._thread.join()

    def _ready(self, run_id: str) -> None:
        with self._changed:
            self._pending.discard(run_id)
            self._changed.notify_all()

    def _work(self, launch) -> None:
        try:
            launch(self.cancel, self._ready)
        except BaseException as err:  # kept for the caller; a thread's exception would only be printed
            self.error = err
        finally:
            with self._changed:
                self._pending.clear()
                self._changed.notify_all()


class ComputingThreads:
    """This process's intra-op threads: one while a batch runs beside the caller's own work (a second
    would only spin at its barriers beside the runs: harness.embedded.threads), the count it had once
    the batch is done. Changed between checks, never inside one."""

    def __init__(self):
        self.saved: int | None = None

    def pin(self) -> ComputingThreads:
        import torch

        self.saved = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def restore(self) -> None:
        if self.saved is not None:
            import torch

            torch.set_num_threads(self.saved)
            self.saved = None
