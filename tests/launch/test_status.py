"""`python -m harness status` and the ETA it shares with the progress line, on a real local trainer
process (Ray jobs are covered by test_ray_cluster.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.launch.progress import eta_s, format_eta
from harness.launch.runner import TRAINER_FILE
from harness.launch.sources import LocalProcess
from harness.launch.status import in_flight
from harness.records.atomic import atomic_write_json
from harness.records.rundir import RunDir
from harness.spec import load_knobs, resolve


def test_eta_is_time_per_done_rollout_times_rollouts_left():
    assert eta_s(started=100.0, done=4, total=10, now=140.0) == 60.0
    assert eta_s(started=100.0, done=0, total=10, now=140.0) is None  # nothing to extrapolate from
    assert eta_s(started=100.0, done=10, total=10, now=140.0) == 0.0
    assert format_eta(None) == "ETA unknown" and format_eta(75) == "ETA 1:15" and format_eta(3725) == "ETA 1:02:05"


def test_a_live_local_trainer_is_listed_with_its_last_rollout_until_it_ends(tmp_path):
    spec = resolve(load_knobs(DEFAULT_KNOBS_DIR), "p1", "near-aligned", "colocate", "embedded", {"num-rollout": 10})
    run_dir = RunDir(tmp_path / spec.run_id).create()
    run_dir.write_spec(spec.to_dict())
    run_dir.set_status("running")
    for n in range(4):
        run_dir.append_record({"kind": "rollout", "n": n, "metrics": {"rollout/raw_reward": 0.3}})
    run_dir.close()
    trainer = LocalProcess(["sleep", "60"], tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        atomic_write_json(run_dir.file(TRAINER_FILE), trainer.identity())
        (found,) = in_flight(tmp_path)
        assert found.run_id == spec.run_id and found.last_rollout == 3 and found.total == 10 and found.eta is not None
        pgid = trainer.identity()["pgid"]
        assert f"local process group {pgid}" in found.line() and f"stop: kill -- -{pgid}" in found.line() and "(4/10)" in found.line()
    finally:
        trainer.stop()
    deadline = time.time() + 10
    while in_flight(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    assert in_flight(tmp_path) == []
    assert json.loads(run_dir.file(TRAINER_FILE).read_text())["pid"]  # the record stays; only the listing changes


def test_status_of_a_runs_directory_that_does_not_exist_says_so(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "status", "--runs-dir", str(tmp_path / "none")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "no runs in flight" in done.stdout, done.stderr
