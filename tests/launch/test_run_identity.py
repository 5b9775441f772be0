"""Turning W&B on (or renaming its project) reuses a finished run instead of relaunching it: the
run id hashes what a run computes, not where its metrics go (harness.spec.run_identity). Driven as
a user would: `harness run` on the vime backend with a site file whose VIME checkout holds the
stand-in trainer (tests/launch/vime_like_train.py), run as a local process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness import REPO_ROOT
from harness.records.rundir import RunDir

HERE = Path(__file__).parent


def _site(root: Path, wandb: str = "") -> Path:
    paths = "".join(
        f"  /path/to/{name}: {root / 'data' / name}\n" for name in ("Qwen3-30B-A3B", "Qwen3-30B-A3B-FP8", "Qwen3-30B-A3B_torch_dist", "dapo-math-17k")
    )
    site = root / ("site-wandb.yaml" if wandb else "site.yaml")
    site.write_text(f"paths:\n{paths}vime-root: {root / 'vime'}\nruns-dir: {root / 'runs'}\nenv:\n  set:\n    STANDIN_STEP_S: '0'\n{wandb}")
    return site


def _run(site: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--stage",
        "p0",
        "--rung",
        "fp8-plus-filters",
        "--backend",
        "vime",
        "--site",
        str(site),
        "--set",
        "num-rollout=3",
    ]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_toggling_wandb_reuses_the_finished_run(tmp_path):
    (tmp_path / "vime").mkdir()
    shutil.copy(HERE / "vime_like_train.py", tmp_path / "vime" / "train.py")
    first = _run(_site(tmp_path))
    assert first.returncode == 0, first.stderr[-3000:]
    run_path = Path(first.stdout.strip().splitlines()[-1])
    run = RunDir(run_path).load()
    assert run.status.state == "finished" and run.steps() == [0, 1, 2]
    log_before, status_before = (run_path / "log.txt").read_bytes(), (run_path / "status.json").read_bytes()

    again = _run(_site(tmp_path, wandb="wandb:\n  project: renamed-project\n  mode: offline\n"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == str(run_path)  # the same run id, the same directory
    # Reused, not relaunched: the trainer did not run again (its log and status are as they were).
    assert (run_path / "log.txt").read_bytes() == log_before and (run_path / "status.json").read_bytes() == status_before
    assert len([p for p in (tmp_path / "runs").iterdir() if p.is_dir()]) == 1
