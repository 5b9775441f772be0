"""The embedded trainer submitted as a Ray job to a real single-node Ray head, as VIME is launched.

All traffic stays on loopback: the head and the submission run inside a network namespace that
has only `lo` (tests/launch/ray_head.py says why and how it is stopped).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ray_head import LoopbackRayHead, netns_available

from harness import REPO_ROOT
from harness.records.rundir import RunDir


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    why_not = netns_available()
    if why_not:
        pytest.skip(f"Ray-job launch test: {why_not}")
    head = LoopbackRayHead(f"lab-ray-{os.getpid()}", tmp_path_factory.mktemp("ray"))
    try:
        head.start()
        yield head
    finally:
        head.stop()


def test_embedded_trainer_runs_as_a_ray_job(ray_head, tmp_path):
    result = subprocess.run(
        ray_head.in_ns(
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
            ray_head.address,
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
