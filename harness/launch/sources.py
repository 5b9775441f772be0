"""Two ways to run a trainer, one interface: a local process group, or a Ray job (ray_job.py).

Both give output lines as they arrive (`poll`), an exit code when done, and a `stop` that ends
only what this harness started: the process group it created, or the Ray job id it submitted.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import threading
from pathlib import Path

# How the harness stops a trainer's process group, mildest first. SIGINT is what Ctrl-C in a
# terminal sends: Python trainers (VIME's train.py, the embedded one) raise KeyboardInterrupt and
# run their cleanup, which stops helpers they started in sessions of their own (the embedded
# non-colocate vLLM server), out of reach of a signal to this group. SIGTERM would end Python
# at once, without that cleanup; it and SIGKILL follow only when the trainer does not end.
STOP_SEQUENCE = ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, None))


class LineStream:
    """A trainer's output read on a thread of its own: `poll` gives what arrived, `eof` says when
    every writer has closed it (the trainer and anything it started that kept its stdout)."""

    def __init__(self, stream):
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.eof = False
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        with stream:
            for line in stream:
                self._lines.put(line)
        self._lines.put(None)

    def poll(self, timeout: float) -> list[str]:
        """Lines that arrived within `timeout` seconds (all that are queued, at least one wait)."""
        out: list[str] = []
        try:
            item = self._lines.get(timeout=timeout)
            while True:
                if item is None:
                    self.eof = True
                    break
                out.append(item)
                item = self._lines.get_nowait()
        except queue.Empty:
            pass
        return out


class LocalProcess:
    """The trainer as a child process in its own process group (so stop reaches its children)."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]):
        self.description = f"local process: {shlex.join(command[:3])} ..."
        self._proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        self._output = LineStream(self._proc.stdout)

    def identity(self) -> dict:
        """What a later launch needs to tell whether this trainer still runs (trainer.json)."""
        return {"pid": self._proc.pid, "pgid": self._proc.pid, "start_ticks": _process_start_ticks(self._proc.pid), "host": os.uname().nodename}

    def poll(self, timeout: float) -> list[str]:
        return self._output.poll(timeout)

    def exit_code(self) -> int | None:
        if not self._output.eof:
            return None
        return self._proc.wait()

    def stop(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to our own process group (STOP_SEQUENCE), each only
        while the trainer has not ended; the group is the one start_new_session gave the child."""
        pgid = self._proc.pid
        for signum, grace in STOP_SEQUENCE:
            if self._proc.poll() is not None:
                break
            try:
                os.killpg(pgid, signum)
            except ProcessLookupError:
                break
            try:
                self._proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        self._proc.wait()
        try:
            os.killpg(pgid, signal.SIGKILL)  # the trainer has ended; anything left in its group has no owner
        except ProcessLookupError:
            pass


def _process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid,
    it names one process, so a pid the kernel has since reused is not mistaken for our trainer."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def trainer_still_running(identity: dict) -> str | None:
    """For a trainer recorded by `identity()`: a sentence saying it still runs, or None if it ended."""
    if identity.get("pid"):
        pid = int(identity["pid"])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by someone else
        ticks = _process_start_ticks(pid)
        if ticks is not None and identity.get("start_ticks") is not None and ticks != identity["start_ticks"]:
            return None  # the pid now belongs to another process
        return f"its trainer (process group {identity.get('pgid', pid)}) is still running: stop it with kill -- -{identity.get('pgid', pid)}"
    if identity.get("ray_job"):
        from harness.launch.ray_job import TERMINAL, client_for, job_status

        job, address = identity["ray_job"], identity.get("address")
        try:
            status = job_status(client_for(address), job)
        except Exception as err:  # unreachable cluster: we cannot tell, so we must not delete
            return f"its Ray job {job} at {address} may still run (cannot ask: {str(err).splitlines()[0][:120]})"
        if status is not None and status not in TERMINAL:
            return f"its Ray job {job} at {address} is {status}: stop it with `ray job stop {job} --address {address}`"
    return None
