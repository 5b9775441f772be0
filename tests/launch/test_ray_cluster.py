"""A run on a real two-node Ray cluster outlives the harness that launched it.

Against `ray.cluster_utils.Cluster` (2 nodes, one CPU each, loopback only: ray_cluster.py) and a
stand-in VIME train.py (vime_like_train.py: arguments printed at start, VIME's log lines, no end
line), driven with a site file as a user on a login node would: pytest submits the run; Ctrl-C stops
pytest while the job runs; the job keeps running, pytest says how to stop it, and `harness status`
lists it with its last rollout and ETA; `harness run` of the same spec attaches to the job (its
submission id is the run id, whichever front end asks) instead of submitting a second one, and
finishes the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_cluster import MultiNodeRay

from harness import REPO_ROOT
from harness.records.rundir import RunDir

HERE = Path(__file__).parent
ROLLOUTS = 8
STEP_S = 0.3
HOLD_AT = 3  # the job waits before this rollout until the test releases it


@pytest.fixture
def site(ray_cluster, tmp_path):
    """A VIME checkout (the stand-in train.py), a separate working directory and a shared runs
    directory, and the site file that names them."""
    vime = tmp_path / "vime"
    vime.mkdir()
    shutil.copy(HERE / "vime_like_train.py", vime / "train.py")
    (tmp_path / "work").mkdir()
    paths = "".join(
        f"  /path/to/{name}: {tmp_path / 'data' / name}\n"
        for name in ("Qwen3-30B-A3B", "Qwen3-30B-A3B-FP8", "Qwen3-30B-A3B_torch_dist", "dapo-math-17k")
    )
    text = (
        f"paths:\n{paths}"
        f"vime-root: {vime}\nworking-dir: {tmp_path / 'work'}\nruns-dir: {tmp_path / 'runs'}\nray-address: {ray_cluster.address}\n"
        f"env:\n  forward: [LAB_SITE_*]\n  set:\n    STANDIN_STEP_S: '{STEP_S}'\n    STANDIN_MARK: from-site\n"
        f"    STANDIN_HOLD_AT: '{HOLD_AT}'\n    STANDIN_RELEASE: {tmp_path / 'release'}\n"
        # The jobs' python3 is this environment's (it has tensorboard), as a VIME image's is VIME's.
        f"    PATH: '{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}'\n"
        "flags:\n  use-tensorboard: true\nwandb:\n  project: lab-ci\n  mode: offline\n"
    )
    (tmp_path / "site.yaml").write_text(text)
    return tmp_path


def harness(cluster: MultiNodeRay, *args: str) -> list[str]:
    return cluster.in_ns(sys.executable, "-m", "harness", *args)


def steps_on_disk(runs: Path) -> int:
    return sum(path.read_text().count('"kind": "step"') for path in runs.glob("*/metrics.jsonl"))


# A test file for the pytest front end: one run through the session's get_run fixture.
PYTEST_FILE = f"""
def test_the_run(get_run):
    run = get_run("p0", "fp8-plus-filters", "colocate", **{{"num-rollout": {ROLLOUTS}}})
    assert run.status.state == "finished"
"""


def test_a_ray_job_outlives_the_harness_and_is_attached_to_again(ray_cluster, site):
    site_file = str(site / "site.yaml")
    (site / "test_one_run.py").write_text(PYTEST_FILE)
    plugins = ("-p", "fixtures.options", "-p", "fixtures.knobs", "-p", "fixtures.runs", "-p", "no:randomly", "-p", "no:cacheprovider")
    pytest_args = (sys.executable, "-m", "pytest", "-q", *plugins, str(site / "test_one_run.py"), "--backend", "vime", "--site", site_file)
    env = dict(os.environ, LAB_SITE_NAME="forwarded", LAB_PRIVATE="not-forwarded", PYTHONPATH=str(REPO_ROOT))
    first = subprocess.Popen(ray_cluster.in_ns(*pytest_args), cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = site / "runs"
    deadline = time.time() + 60
    while steps_on_disk(runs) < 2 and first.poll() is None and time.time() < deadline:
        time.sleep(0.3)
    assert first.poll() is None, first.communicate()[0][-3000:]
    assert steps_on_disk(runs) >= 2, "the job logged fewer than 2 steps within 60 s"
    first.send_signal(signal.SIGINT)  # Ctrl-C: pytest stops following; the job is the cluster's
    out, _ = first.communicate(timeout=30)
    (run_path,) = [path for path in runs.iterdir() if path.is_dir()]
    run_id = run_path.name
    assert "KeyboardInterrupt" in out and "Ray jobs left running" in out, out[-3000:]
    assert f"{run_id}: rollout 1/{ROLLOUTS}, ETA" in out, out[-3000:]  # the progress line, past pytest's capture
    assert f"Ray job {run_id} still runs" in out and f"ray job stop {run_id} --address {ray_cluster.address}" in out, out[-3000:]
    status = json.loads((run_path / "status.json").read_text())
    assert status["state"] == "interrupted" and "still runs" in status["note"]

    listed = subprocess.run(harness(ray_cluster, "status", "--site", site_file), capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr[-2000:]
    line = next((line for line in listed.stdout.splitlines() if line.startswith(run_id)), None)
    assert line is not None, listed.stdout
    assert f"Ray job {run_id} at" in line and "last rollout " in line and f"/{ROLLOUTS})" in line and "ETA" in line, line

    assert f"last rollout {HOLD_AT - 1} ({HOLD_AT}/{ROLLOUTS})" in line, line
    (site / "release").touch()  # the job goes on

    run_args = ("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--backend", "vime", "--site", site_file, "--set", f"num-rollout={ROLLOUTS}")
    again = subprocess.run(harness(ray_cluster, *run_args), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == str(run_path)
    run = RunDir(run_path).load()
    assert run.status.state == "finished" and run.steps() == list(range(ROLLOUTS))
    log = (run_path / "log.txt").read_text()
    assert log.splitlines()[0] == f"# attached to Ray job {run_id} at {ray_cluster.address} (attached: submitted earlier)"
    assert json.loads((run_path / "trainer.json").read_text())["ray_job"] == run_id  # the submission id is the run id
    # The job started in the site's working directory, received the site's variables only, and wrote
    # its dumps under the shared runs directory (its own argument print says where).
    assert f"working directory: {site / 'work'}" in log
    assert "variable STANDIN_MARK=from-site" in log and "variable LAB_SITE_NAME=forwarded" in log and "variable LAB_PRIVATE=(not set)" in log
    assert f"{run_path / 'dumps'}/rollout_{{rollout_id}}.pt" in log

    # TensorBoard events written by the job into the run directory (the launcher's --tensorboard-dir),
    # read back by the records' reader as the same steps.
    from harness.records.tbevents import read_event_file

    (event_file,) = (run_path / "tensorboard").glob("*tfevents*")
    records, _ = read_event_file(event_file)
    assert sorted(r.n for r in records if r.kind == "step") == list(range(ROLLOUTS))
    environment = json.loads((run_path / "environment.json").read_text())
    # The run's W&B run (offline, written by the job under the run directory) and its TensorBoard
    # directory, recorded from the job's own log.
    assert environment["tensorboard"]["dir"] == str(run_path / "tensorboard")
    wandb = environment["wandb"]
    assert wandb["mode"] == "offline" and wandb["project"] == "lab-ci" and wandb["run_id"], wandb
    assert Path(wandb["dir"]).resolve().is_relative_to(run_path.resolve()) and Path(wandb["dir"]).is_dir(), wandb
    # Provenance from the nodes that ran the job: each of the cluster's two nodes described itself
    # inside the job (harness.launch.node_probe); what the login node said is kept apart.
    probed = environment["nodes"]
    assert len(probed) == 2 and len({node["ray_node_id"] for node in probed}) == 2, probed
    assert all(node["versions"]["python"] and "env" in node and "gpus" in node for node in probed)
    assert environment["hardware"]["nodes"]["count"] == 2 and "inside the Ray job" in environment["hardware"]["nodes"]["source"]
    assert environment["launched_from"]["hardware"]["nodes"]["count"] == 1
    launched = environment["ray_job"]
    assert launched["working_dir"] == str(site / "work") and "LAB_SITE_NAME" in launched["env"] and "LAB_PRIVATE" not in launched["env"]

    jobs = subprocess.run(
        ray_cluster.in_ns(
            sys.executable,
            "-c",
            f"from ray.job_submission import JobSubmissionClient as C; print(sorted(j.submission_id for j in C({ray_cluster.address!r}).list_jobs()))",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert jobs.stdout.strip() == repr([run_id]), jobs.stdout + jobs.stderr[-2000:]  # one job: never submitted twice
    after = subprocess.run(harness(ray_cluster, "status", "--site", site_file), capture_output=True, text=True, timeout=60)
    assert "no runs in flight" in after.stdout, after.stdout
