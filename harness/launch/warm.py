"""Warm start for the embedded trainer: one pre-imported interpreter per launcher (and per
environment) forks each run's trainer (harness.embedded.preloaded), so a session of many runs
pays the ~10 s import of torch, Megatron-Core and vLLM once instead of once per run.

`WarmProcess` has LocalProcess's interface (poll, exit_code, stop, identity): the trainer is still
one process per run, in a session and process group of its own, writing to a pipe this launcher
reads; only its parent is the pre-imported interpreter instead of this one. Anything that keeps
the server from starting raises WarmStartUnavailable, and the launcher starts the trainer cold.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from harness.launch.sources import STOP_SEQUENCE, LineStream, _process_start_ticks

READY_TIMEOUT_S = 300.0  # imports take ~10 s alone; much longer beside other jobs on 2 cores
PRELOADED_MODULE = "harness.embedded.preloaded"
# Variables that differ from run to run without changing what the imports did. pytest rewrites
# PYTEST_CURRENT_TEST at every test's setup, call and teardown: keyed on it, every test that
# launched a run started (and kept) a server of its own, and paid the imports again.
PER_RUN_ENV = ("PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST")


class WarmStartUnavailable(RuntimeError):
    pass


class _Server:
    """One pre-imported interpreter and the socket to it; a reader thread dispatches its messages."""

    def __init__(self, env: dict[str, str], cwd: Path):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = ours
        self._proc = subprocess.Popen(
            [sys.executable, "-m", PRELOADED_MODULE, str(theirs.fileno())],
            cwd=cwd,
            env=dict(env, PYTHONUNBUFFERED="1"),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # import warnings; every run's own output goes to its pipe
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher, which stops its runs
        )
        theirs.close()
        self._started: queue.Queue[dict] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._exit_seen = threading.Condition()
        self._lock = threading.Lock()  # one request at a time: replies come back in order
        self.alive = True
        self._ready: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            ready = self._ready.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            self.close()
            raise WarmStartUnavailable(f"the pre-imported trainer interpreter was not ready within {READY_TIMEOUT_S:.0f} s") from None
        if not ready.get("ready"):
            self.close()
            raise WarmStartUnavailable(f"the pre-imported trainer interpreter could not import the trainer: {ready.get('error', 'it exited')}")
        self.pid = ready["pid"]

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                if "ready" in message:
                    self._ready.put(message)
                elif "started" in message:
                    self._started.put(message)
                elif "exited" in message:
                    with self._exit_seen:
                        self._exits[message["exited"]] = message["code"]
                        self._exit_seen.notify_all()
        self.alive = False
        self._ready.put({"ready": False, "error": "it exited"})
        self._started.put({"started": None})
        with self._exit_seen:
            self._exit_seen.notify_all()

    def fork(self, module: str, argv: list[str], cwd: Path, env: dict[str, str], out_fd: int) -> int:
        request = json.dumps({"module": module, "argv": argv, "cwd": str(cwd), "env": env}).encode() + b"\n"
        with self._lock:
            if not self.alive:
                raise WarmStartUnavailable("the pre-imported trainer interpreter has exited")
            socket.send_fds(self._sock, [request], [out_fd])
            reply = self._started.get()
        if reply["started"] is None:
            raise WarmStartUnavailable("the pre-imported trainer interpreter exited before forking the run")
        return int(reply["started"])

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit code once the server has reaped it; None while it runs (after `timeout`)."""
        with self._exit_seen:
            self._exit_seen.wait_for(lambda: pid in self._exits or not self.alive, timeout=timeout)
            if pid in self._exits:
                return self._exits[pid]
        if not self.alive and not _exists(pid):
            return -signal.SIGKILL  # the server died; the run ended without a reported code
        return None

    def close(self) -> None:
        try:
            # shutdown, not close alone: the reader thread is blocked in recv on this socket, and a
            # close under it leaves the connection open (no EOF reached the server, which was then
            # killed after the wait below, or outlived a launcher that never got here).
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()  # the server exits on EOF
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()  # our own server, by its Popen handle
            self._proc.wait()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _key(env: dict[str, str], cwd: Path) -> str:
    # Imports read the environment (library paths, oneDNN and thread settings): one server per
    # environment, so a run under ONEDNN_MAX_CPU_ISA=AVX2 never forks from a default-ISA server.
    relevant = {k: v for k, v in env.items() if k not in PER_RUN_ENV}
    return hashlib.sha256(json.dumps([sys.executable, str(cwd), sorted(relevant.items())]).encode()).hexdigest()


def _server_for(env: dict[str, str], cwd: Path) -> _Server:
    key = _key(env, cwd)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive:
            server = _SERVERS[key] = _Server(env, cwd)
        return server


@atexit.register
def _close_servers() -> None:
    for server in list(_SERVERS.values()):
        server.close()


class WarmProcess:
    """The embedded trainer (or the paired scorer) forked from the pre-imported interpreter.
    `command` is the cold command (python -m MODULE ARGV); only MODULE and ARGV are sent."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]):
        from harness.embedded.preloaded import MODULES

        module_at = command.index("-m") + 1 if "-m" in command else -1
        if module_at <= 0 or command[module_at] not in MODULES:
            raise WarmStartUnavailable(f"warm start serves {', '.join(MODULES)}, not {shlex.join(command[:3])}")
        self._server = _server_for(env, cwd)
        read_fd, write_fd = os.pipe()
        try:
            self.pid = self._server.fork(command[module_at], command[module_at + 1 :], cwd, env, write_fd)
        finally:
            os.close(write_fd)  # the child holds its own copy; EOF comes when it (and its children) close it
        self.description = f"process forked from a pre-imported interpreter (pid {self._server.pid}): {shlex.join(command[:3])} ..."
        self._output = LineStream(os.fdopen(read_fd, "r", errors="replace"))

    def identity(self) -> dict:
        return {"pid": self.pid, "pgid": self.pid, "start_ticks": _process_start_ticks(self.pid), "host": os.uname().nodename}

    def poll(self, timeout: float) -> list[str]:
        return self._output.poll(timeout)

    def exit_code(self) -> int | None:
        if not self._output.eof:
            return None
        while True:  # output is closed, so the process is ending: wait for its code
            code = self._server.exit_code(self.pid, timeout=1.0)
            if code is not None:
                return code

    def stop(self) -> None:
        """As LocalProcess.stop: SIGINT, SIGTERM, SIGKILL to the run's own process group."""
        for signum, grace in STOP_SEQUENCE:
            if self._server.exit_code(self.pid, timeout=0) is not None:
                break
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                break
            if self._server.exit_code(self.pid, timeout=grace) is not None:
                break
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the trainer has ended; anything left in its group has no owner
        except ProcessLookupError:
            pass


def run_to_end(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run `command` (python -m MODULE ARGV, MODULE a preloaded one) forked from the pre-imported
    interpreter and wait for it: (exit code, its output, stdout and stderr in one stream). Raises
    WarmStartUnavailable when no server can start (the caller then runs it cold), and
    subprocess.TimeoutExpired, with the output so far, after stopping it at `timeout` seconds; any
    other exception (KeyboardInterrupt, Terminated) stops it too before it goes on."""
    import time

    proc = WarmProcess(command, cwd, env)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while (code := proc.exit_code()) is None:
            lines += proc.poll(1.0)
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(command, timeout, output="".join(lines))
    except BaseException:
        # The timeout, Ctrl-C, or SIGTERM raised by signals_raise: the trainer runs in a session
        # of its own, so no signal to this process reaches it; stopped here, or it outlives us.
        proc.stop()
        raise
    lines += proc.poll(0.1)
    return code, "".join(lines)
