"""The embedded trainer submitted as a Ray job to a real Ray cluster, as VIME is launched, with a
site file: the site's runs directory and W&B project, and only the environment the site forwards.

All traffic stays on loopback: the cluster and the submission run inside a network namespace that
has only `lo` (tests/launch/ray_cluster.py says why and how it is stopped).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import REPO_ROOT
from harness.records.rundir import RunDir


def test_embedded_trainer_runs_as_a_ray_job(ray_cluster, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        f"ray-address: {ray_cluster.address}\nruns-dir: {tmp_path / 'runs'}\n"
        "env:\n  forward: [VLLM_*, OMP_*, ONEDNN_*, LAB_*]\n"
        "wandb:\n  project: lab-ci\n  mode: offline\n"
    )
    result = subprocess.run(
        ray_cluster.in_ns(
            sys.executable, "-m", "harness", "run", "--stage", "p1", "--rung", "near-aligned", "--set", "num-rollout=2", "--site", str(site)
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_path = Path(result.stdout.strip().splitlines()[-1])
    assert run_path.parent == tmp_path / "runs"  # the site's runs directory
    run = RunDir(run_path).load()
    assert run.status.state == "finished"
    assert run.steps() == [0, 1]
    assert (run.path / "log.txt").read_text().splitlines()[0] == f"# launched as Ray job {run_path.name} at {ray_cluster.address}"
    assert run.series("train/train_rollout_logprob_abs_diff")
    # The W&B run the embedded trainer logged (offline, as VIME's --use-wandb), in the record.
    wandb = json.loads((run_path / "environment.json").read_text())["wandb"]
    assert wandb["mode"] == "offline" and wandb["project"] == "lab-ci" and wandb["run_id"] and Path(wandb["dir"]).is_dir(), wandb
