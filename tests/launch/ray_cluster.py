"""A real multi-node Ray cluster on this machine for launcher tests (`ray.cluster_utils.Cluster`:
a head with the job server and more worker nodes, one CPU each), on loopback only.

Ray started normally binds to the machine's own address and listens on all interfaces; tests here
may only send traffic to loopback. Inside a network namespace that has only `lo` up (made with
`ip netns`, which needs root, as CI has), every Ray port binds to 127.0.0.1. The cluster lives in a small
process of its own started under `ip netns exec` (a Cluster belongs to the process that made it):
run as a script it starts the cluster, prints `READY <job server address>`, and calls
`cluster.shutdown()` when its stdin closes. `MultiNodeRay.stop` closes that stdin, waits, and
only then ends whatever is left in the namespace (every process there is ours) and deletes it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DASHBOARD_PORT = 8265


def netns_available() -> str | None:
    """None when a loopback-only namespace can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root to create a network namespace (ip netns add)"
    if not shutil.which("ip"):
        return "needs iproute2's `ip` to create a network namespace"
    return None


def main(nodes: int) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": DASHBOARD_PORT,
            "node_ip_address": "127.0.0.1",
        },
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        print(f"READY http://127.0.0.1:{DASHBOARD_PORT} nodes={len(cluster.list_all_nodes())}", flush=True)
        sys.stdin.read()  # until the test closes our stdin
    finally:
        cluster.shutdown()


class MultiNodeRay:
    def __init__(self, name: str, nodes: int = 2):
        self.ns, self.nodes = name, nodes
        # Short: Ray's unix sockets live under it, and a socket path is limited to 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="lr", dir="/tmp"))
        self.proc: subprocess.Popen | None = None
        self.address = f"http://127.0.0.1:{DASHBOARD_PORT}"
        self.env = dict(os.environ, RAY_TMPDIR=str(self.temp_dir), RAY_USAGE_STATS_ENABLED="0")

    def in_ns(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *command]

    def start(self, timeout: float = 120.0) -> None:
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        subprocess.run(self.in_ns("ip", "link", "set", "lo", "up"), check=True)
        self.proc = subprocess.Popen(
            self.in_ns(sys.executable, __file__, str(self.nodes)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=self.env,
        )
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the Ray cluster process exited with {self.proc.wait()}: {''.join(seen)[-3000:]}")
            seen.append(line)
            if line.startswith("READY "):
                return
        raise RuntimeError(f"the Ray cluster was not ready within {timeout:.0f} s: {''.join(seen)[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # main() returns from its read and calls cluster.shutdown()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):  # leftovers: every process in our namespace is ours
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


if __name__ == "__main__":
    main(int(sys.argv[1]))
