"""``python -m harness.embedded.preloaded FD``: an interpreter that has imported the embedded
trainer's libraries once (torch, Megatron-Core, vLLM: about 10 s on 2 cores) and forks one fresh
trainer process per run from there.

Measured on the 2-core AMD EPYC machine: a 30-step P1 run took 26 s started cold and 15 s forked
from here, with every logged step line identical to the cold run's (same seed). What a forked
trainer does not share with the cold path is only the import work: the fork happens before any
model, engine, process group or thread pool exists (importing torch/vLLM starts no OpenMP pool),
and the child runs ``harness.embedded.train`` as ``python -m`` would, in a session of its own.

Protocol on the Unix socket FD (the launcher's end: harness.launch.warm):
  <- {"ready": true, "pid": P}                 once the imports are done (or {"ready": false, "error": ...})
  -> {"argv": [...], "cwd": "...", "env": {...}} with one file descriptor attached: the child's stdout+stderr
  <- {"started": PID}                          the child's pid (= its process group and session)
  <- {"exited": PID, "code": C}                when the child ends (C as subprocess reports it: -N for signal N)
The server exits when the launcher's end of the socket closes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import traceback

TRAINER_MODULE = "harness.embedded.train"
# What a child may run: the trainer, the paired scorer and the lever re-scorer (they build the same engine and model from
# the same imports). Anything else is refused: the server runs nothing it was not built for.
MODULES = (TRAINER_MODULE, "harness.embedded.paired_score", "harness.embedded.lever_score")
REQUEST_LIMIT = 1 << 20


def preload() -> None:
    """What the embedded trainer imports before it builds anything (its lazy imports included), but
    not the trainer module itself: each child executes that fresh, as ``python -m`` does, so its
    import-time setup reads the run's environment."""
    import megatron.core  # noqa: F401
    from vllm import LLM  # noqa: F401

    from harness.embedded import data, engine, factory, flags, fp8, logprobs, loop, megatron_model, policy, record, settings  # noqa: F401


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


def _run_trainer(request: dict, out_fd: int, sock: socket.socket) -> None:
    """In the forked child: become the trainer process ``python -m harness.embedded.train ARGV`` would be."""
    import atexit
    import runpy

    code = 1
    try:
        sock.close()
        os.setsid()  # its own session and process group, as LocalProcess's start_new_session gives
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        module = request.get("module", TRAINER_MODULE)
        if module not in MODULES:
            raise SystemExit(f"error: the pre-imported interpreter runs {', '.join(MODULES)}, not {module}")
        sys.argv = [module, *request["argv"]]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            if done.code is not None and not isinstance(done.code, int):
                print(done.code, file=sys.stderr)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the exit code
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what a normal interpreter exit runs (engine shutdown hooks)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the pipe's reader may be gone
                pass
        os._exit(code)


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops runs; a terminal's Ctrl-C is its to handle
    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - the launcher falls back to a cold start and says why
        _send(sock, {"ready": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        return 1
    _send(sock, {"ready": True, "pid": os.getpid(), "threads": len(os.listdir("/proc/self/task"))})
    children: set[int] = set()
    buffer, pending_fds = b"", []  # a request's fd arrives with its first bytes; the rest may follow
    while True:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            data, fds, _, _ = socket.recv_fds(sock, REQUEST_LIMIT, 1)
            if not data:
                return 0  # the launcher is gone; its runs keep their own sessions
            buffer += data
            pending_fds.extend(fds)
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                out_fd = pending_fds.pop(0)
                pid = os.fork()
                if pid == 0:
                    _run_trainer(request, out_fd, sock)
                os.close(out_fd)
                children.add(pid)
                _send(sock, {"started": pid})
        _reap(sock, children)


if __name__ == "__main__":
    # os._exit: the interpreter built nothing, so its exit handlers and module teardown have nothing
    # to flush or release, and they took ~7 s (measured) that every session's end waited for.
    os._exit(serve(int(sys.argv[1])))
