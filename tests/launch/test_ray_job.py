"""The embedded trainer submitted as a Ray job to a real Ray cluster, as VIME is launched.

All traffic stays on loopback: the cluster and the submission run inside a network namespace that
has only `lo` (tests/launch/ray_cluster.py says why and how it is stopped).
"""

from __future__ import annotations

import subprocess
import sys

from harness import REPO_ROOT
from harness.records.rundir import RunDir


def test_embedded_trainer_runs_as_a_ray_job(ray_cluster, tmp_path):
    result = subprocess.run(
        ray_cluster.in_ns(
            sys.executable,
            "-m",
            "harness",
            "run",
            "--stage",
            "p1",
            "--rung",
            "near-aligned",
            "--set",
            "num-rollout=2",
            "--runs-dir",
            str(tmp_path),
            "--ray-address",
            ray_cluster.address,
            "--timeout",
            "400",
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = RunDir(result.stdout.strip().splitlines()[-1]).load()
    assert run.status.state == "finished"
    assert run.steps() == [0, 1]
    assert "Ray job" in (run.path / "log.txt").read_text().splitlines()[0]
    assert run.series("train/train_rollout_logprob_abs_diff")
