"""Two ways to run a trainer, one interface: a local process group, or a Ray job.

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
import time
from pathlib import Path

from harness.spec import SpecError

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
        job, address = identity["ray_job"], identity.get("address")
        try:
            from ray.job_submission import JobSubmissionClient

            status = str(JobSubmissionClient(address).get_job_status(job)).split(".")[-1]
        except Exception as err:  # unreachable cluster: we cannot tell, so we must not delete
            return f"its Ray job {job} at {address} may still run (cannot ask: {str(err).splitlines()[0][:120]})"
        if status not in RayJob.TERMINAL:
            return f"its Ray job {job} at {address} is {status}: stop it with `ray job stop {job} --address {address}`"
    return None


class RayJob:
    """The trainer as a Ray job, submitted to the Jobs API at `address` (as VIME is launched)."""

    TERMINAL = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 143}

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], address: str):
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise SpecError("--ray-address needs Ray with its job client: install ray[default]") from None
        try:
            self._client = JobSubmissionClient(address)
        except Exception as err:  # Ray raises ConnectionError or RuntimeError with its own text
            raise SpecError(f"--ray-address {address}: cannot reach a Ray job server there ({str(err).splitlines()[0]})") from None
        passed_env = {k: v for k, v in env.items() if k.startswith(("VLLM_", "LAB_", "PYTHON", "OMP_", "NCCL_", "CUDA_", "TORCH_", "HF_"))}
        self.job_id = self._client.submit_job(entrypoint=f"cd {shlex.quote(str(cwd))} && {shlex.join(command)}", runtime_env={"env_vars": passed_env})
        self.description = f"Ray job {self.job_id} at {address}"
        self._seen_chars = 0
        self._done: int | None = None
        self._address = address

    def identity(self) -> dict:
        return {"ray_job": self.job_id, "address": self._address}

    def poll(self, timeout: float) -> list[str]:
        time.sleep(timeout)
        status = str(self._client.get_job_status(self.job_id)).split(".")[-1]
        logs = self._client.get_job_logs(self.job_id)
        new = logs[self._seen_chars :]
        if status in self.TERMINAL:
            # Logs are read after the status, so everything the job printed is already in `new`.
            self._done = self.TERMINAL[status]
        elif "\n" in new:
            new = new[: new.rindex("\n") + 1]  # hold back a line still being written
        else:
            new = ""
        self._seen_chars += len(new)
        return new.splitlines(keepends=True)

    def exit_code(self) -> int | None:
        return self._done

    def stop(self) -> None:
        if self._done is None:
            self._client.stop_job(self.job_id)
