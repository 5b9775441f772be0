"""A single-node Ray head for tests, on loopback only, owned by the test that starts it.

Started normally, Ray binds to the machine's own address; inside a network namespace with only
`lo` up every port binds to 127.0.0.1. The head runs as
`ray start --head --block` in its own process group, so stopping it means signalling our own
group - never `ray stop`, which would reach every Ray process on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
DASHBOARD_PORT = 8265


def netns_available() -> str | None:
    """None when a loopback-only namespace can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root to create a network namespace (ip netns add)"
    if not shutil.which("ip"):
        return "needs iproute2's `ip` to create a network namespace"
    return None


class LoopbackRayHead:
    def __init__(self, name: str, temp_dir: Path):
        self.ns = name
        self.temp_dir = temp_dir
        self.proc: subprocess.Popen | None = None
        self.address = f"http://127.0.0.1:{DASHBOARD_PORT}"

    def in_ns(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *command]

    def start(self, timeout: float = 120.0) -> None:
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        subprocess.run(self.in_ns("ip", "link", "set", "lo", "up"), check=True)
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        self.proc = subprocess.Popen(
            self.in_ns(
                str(VENV_BIN / "ray"),
                "start",
                "--head",
                "--block",
                "--port=6390",
                "--node-ip-address=127.0.0.1",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={DASHBOARD_PORT}",
                "--include-dashboard=true",
                "--num-cpus=2",
                f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=env,
        )
        probe = f"from ray.job_submission import JobSubmissionClient as C; C({self.address!r}).list_jobs()"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}: {self.proc.stdout.read()[-2000:]}")
            if subprocess.run(self.in_ns(sys.executable, "-c", probe), capture_output=True).returncode == 0:
                return
            time.sleep(2)
        raise RuntimeError(f"the Ray job server did not answer at {self.address} within {timeout:.0f} s")

    def stop(self) -> None:
        """SIGTERM our `ray start` group; then end whatever is left inside our own namespace (Ray
        daemonises some workers into new sessions, but every process in the namespace is ours)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.namespace_pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + 10
            while pids and time.time() < deadline:
                time.sleep(0.5)
                pids = self.namespace_pids()
        subprocess.run(["ip", "netns", "delete", self.ns], capture_output=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def namespace_pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]
