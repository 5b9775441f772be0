"""The trainer as a Ray job (as VIME is launched), which outlives the process that submitted it.

The job's submission id is the run id (`<run-id>`, then `<run-id>-2`, ... when a finished or
failed job already holds it, Ray ids being single-use), so a second pytest or `harness run` of the
same spec finds the job still running and follows it instead of submitting it again. The log is
followed incrementally through Ray's log stream (`tail_job_logs`), never fetched whole on a timer.
The entrypoint changes into the cluster's working directory (the site's, not this machine's path)
and receives only the environment the site forwards.
"""

from __future__ import annotations

import asyncio
import queue
import shlex
import threading
import time
from pathlib import Path

from harness.spec import SpecError

HARNESS_PACKAGE = Path(__file__).resolve().parent.parent  # harness/, shipped to the nodes with each job
TERMINAL = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 143}
# Forwarded to a job when no site file says what to forward: the variables the trainers read.
DEFAULT_FORWARD_PREFIXES = ("VLLM_", "LAB_", "PYTHON", "OMP_", "NCCL_", "CUDA_", "TORCH_", "HF_")
# How long to wait before opening the log stream again when it closed while the job still runs.
RECONNECT_S = 1.0


def client_for(address: str):
    """A JobSubmissionClient for `address`, or one error line saying why there is none."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise SpecError("--ray-address needs Ray with its job client: install ray[default]") from None
    try:
        return JobSubmissionClient(address)
    except Exception as err:  # Ray raises ConnectionError or RuntimeError with its own text
        raise SpecError(f"--ray-address {address}: cannot reach a Ray job server there ({str(err).splitlines()[0]})") from None


def job_status(client, job_id: str) -> str | None:
    """PENDING / RUNNING / SUCCEEDED / ...; None when no job has this id."""
    try:
        return str(client.get_job_status(job_id)).split(".")[-1]
    except RuntimeError as err:
        if "404" in str(err) or "does not exist" in str(err):
            return None
        raise


def jobs_of_run(client, run_id: str) -> list[tuple[str, str]]:
    """(submission id, status) of every job submitted for this run, oldest first."""
    found = []
    n = 1
    while True:
        job_id = run_id if n == 1 else f"{run_id}-{n}"
        status = job_status(client, job_id)
        if status is None:
            return found
        found.append((job_id, status))
        n += 1


def job_started_at(client, job_id: str) -> float | None:
    """When the job started (epoch seconds), None while it is pending or when Ray cannot say."""
    try:
        start_ms = client.get_job_info(job_id).start_time
    except Exception:
        return None
    return start_ms / 1000.0 if start_ms else None


def entrypoint(command: list[str], cwd: str | Path) -> str:
    """The shell line Ray runs: the nodes describe themselves (harness.launch.node_probe, with the
    trainer's interpreter; its failure never stops the run), then, in the cluster's working
    directory, the trainer."""
    probe = shlex.join([command[0], "-m", "harness.launch.node_probe"])
    return f"{probe} ; cd {shlex.quote(str(cwd))} && {shlex.join(command)}"


def runtime_env(env: dict[str, str]) -> dict:
    """The job's environment: the variables it receives, and this harness package (for the probe)."""
    return {"env_vars": env, "py_modules": [str(HARNESS_PACKAGE)]}


def default_job_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(DEFAULT_FORWARD_PREFIXES)}


class RayJob:
    """One submitted (or attached) Ray job, with LocalProcess's interface: poll, exit_code, stop."""

    TERMINAL = TERMINAL

    def __init__(self, client, address: str, job_id: str, attached: bool):
        self._client = client
        self._address = address
        self.job_id = job_id
        self.attached = attached
        self.description = f"Ray job {job_id} at {address}" + (" (attached: submitted earlier)" if attached else "")
        self._chunks: queue.Queue[str | None] = queue.Queue()
        self._partial = ""
        self._eof = False
        self._done: int | None = None
        self.started_at = job_started_at(client, job_id) if attached else None
        threading.Thread(target=self._pump, daemon=True, name=f"ray-log-{job_id}").start()

    @classmethod
    def submit(cls, command: list[str], cwd: str | Path, env: dict[str, str], address: str, run_id: str) -> RayJob:
        client = client_for(address)
        taken = jobs_of_run(client, run_id)
        job_id = run_id if not taken else f"{run_id}-{len(taken) + 1}"
        client.submit_job(entrypoint=entrypoint(command, cwd), submission_id=job_id, runtime_env=runtime_env(env))
        return cls(client, address, job_id, attached=False)

    @classmethod
    def attach(cls, address: str, job_id: str) -> RayJob:
        return cls(client_for(address), address, job_id, attached=True)

    def identity(self) -> dict:
        return {"ray_job": self.job_id, "address": self._address}

    def stop_hint(self) -> str:
        return f"ray job stop {self.job_id} --address {self._address}"

    # --- the log, read on a thread of its own from Ray's log stream
    def _pump(self) -> None:
        self._seen = 0  # characters of the log already passed on: a reopened stream starts from the top
        while True:
            try:
                asyncio.run(self._tail())
            except Exception:  # the stream broke (a dashboard restart, a dropped connection)
                pass
            try:
                status = job_status(self._client, self.job_id)
            except Exception:
                status = None
            if status in TERMINAL:
                # The stream ends with the job; anything it had not sent yet is in the stored log.
                try:
                    rest = self._client.get_job_logs(self.job_id)[self._seen :]
                except Exception:
                    rest = ""
                if rest:
                    self._chunks.put(rest)
                self._done_status = status
                self._chunks.put(None)
                return
            time.sleep(RECONNECT_S)

    async def _tail(self) -> None:
        """One pass of Ray's log stream; `_seen` counts what was passed on, so a pass that breaks
        midway and the next one (which starts from the top again) never repeat a character."""
        skipped = 0
        async for chunk in self._client.tail_job_logs(self.job_id):
            if skipped < self._seen:  # already passed on by an earlier pass
                drop = min(len(chunk), self._seen - skipped)
                skipped += drop
                chunk = chunk[drop:]
            if chunk:
                self._chunks.put(chunk)
                self._seen += len(chunk)
                skipped = self._seen

    def poll(self, timeout: float) -> list[str]:
        """Whole lines that arrived within `timeout` seconds; a line still being written waits."""
        text = ""
        try:
            item = self._chunks.get(timeout=timeout)
            while True:
                if item is None:
                    self._eof = True
                    break
                text += item
                item = self._chunks.get_nowait()
        except queue.Empty:
            pass
        text = self._partial + text
        if self._eof:
            self._partial = ""
            return text.splitlines(keepends=True)
        cut = text.rfind("\n") + 1
        self._partial = text[cut:]
        return text[:cut].splitlines(keepends=True)

    def exit_code(self) -> int | None:
        if not self._eof:
            return None
        if self._done is None:
            self._done = TERMINAL[self._done_status]
        return self._done

    def stop(self) -> None:
        """Stop the job (the time limit, or a caller that asks): only this job id."""
        if not self._eof:
            self._client.stop_job(self.job_id)
