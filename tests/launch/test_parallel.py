"""Runs launched side by side (harness.launch.parallel): each recorded as if alone, all stopped
together, and the number at once taken from knobs/launch.yaml or --parallel-runs. The launcher runs
a small real trainer process (printing_trainer.py); what one embedded run computes beside another is
checked on real runs in tests/embedded/test_threads.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from test_launcher import TRAINER, pid_alive  # the launcher tests' trainer and process check

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.launch.parallel import run_all, slots
from harness.launch.runner import LaunchOptions, ensure_run
from harness.records.rundir import RunDir
from harness.spec import SpecError, load_knobs, resolve

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def spec(seed: int, rollouts: int):
    return resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded", {"num-rollout": rollouts, "seed": seed})


def test_runs_side_by_side_overlap_and_each_is_recorded_as_alone(tmp_path):
    specs = [spec(seed, 10) for seed in (11, 12)]
    tasks = [lambda cancel, s=s: ensure_run(s, LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False, cancel=cancel)) for s in specs]
    run_dirs = run_all(tasks, slots=2)
    assert [d.id for d in run_dirs] == [s.run_id for s in specs]  # in the order asked
    runs = [d.load() for d in run_dirs]
    assert [r.status.state for r in runs] == ["finished", "finished"]
    assert [len(r.steps()) for r in runs] == [10, 10]
    first, second = ((datetime.fromisoformat(r.status.started), datetime.fromisoformat(r.status.ended)) for r in runs)
    assert first[0] < second[1] and second[0] < first[1], "the two runs did not run at the same time"


def test_one_slot_runs_them_one_after_another(tmp_path):
    specs = [spec(seed, 3) for seed in (21, 22)]
    tasks = [lambda cancel, s=s: ensure_run(s, LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False, cancel=cancel)) for s in specs]
    runs = [d.load() for d in run_all(tasks, slots=1)]
    assert datetime.fromisoformat(runs[0].status.ended) <= datetime.fromisoformat(runs[1].status.started)


def test_a_bad_run_is_raised_after_the_others_finished(tmp_path):
    good = spec(31, 5)

    def bad(cancel):
        raise SpecError("a spec VIME would reject")

    tasks = [bad, lambda cancel: ensure_run(good, LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False, cancel=cancel))]
    with pytest.raises(SpecError, match="VIME would reject"):
        run_all(tasks, slots=2)
    assert RunDir(tmp_path / good.run_id).load().status.state == "finished"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_launcher_stops_every_run_it_started_and_starts_no_more(tmp_path, signum):
    script = (
        "import sys; from pathlib import Path\n"
        "from harness.launch.parallel import run_all\n"
        "from harness.launch.runner import LaunchOptions, ensure_run\n"
        "from harness.spec import load_knobs, resolve\n"
        "k = load_knobs(Path('knobs'))\n"
        "specs = [resolve(k, 'p1', 'near-aligned', 'colocate', 'embedded', {'num-rollout': 10000, 'seed': s}) for s in (41, 42, 43)]\n"
        f"o = dict(runs_dir=Path({str(tmp_path)!r}), trainer={TRAINER!r}, progress=False)\n"
        "run_all([lambda c, s=s: ensure_run(s, LaunchOptions(**o, cancel=c)) for s in specs], 2)\n"
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        started: list[Path] = []
        while time.time() < deadline:
            started = [p for p in tmp_path.iterdir() if p.is_dir() and (p / "metrics.jsonl").exists()]
            if len(started) == 2 and all(len((p / "metrics.jsonl").read_text().splitlines()) >= 6 for p in started):
                break
            time.sleep(0.2)
        assert len(started) == 2, "two runs never logged three steps each"
        harness.send_signal(signum)
        harness.wait(timeout=60)
        assert harness.returncode != 0
        for path in started:
            run = RunDir(path).load()
            assert run.status.state == "interrupted", (path.name, run.status.state)
            assert len(run.steps()) >= 3
            assert not pid_alive(int((path / "trainer.pid").read_text()))
        assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2, "the third run started after the stop"
        assert bystander.poll() is None, "the launcher must not touch processes it did not start"
    finally:
        bystander.kill()
        if harness.poll() is None:
            harness.kill()


def knobs_with_parallel(tmp_path, parallel: dict):
    copy = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, copy)
    launch = yaml.safe_load((copy / "launch.yaml").read_text())
    launch["parallel"] = {**launch["parallel"], **parallel}
    (copy / "launch.yaml").write_text(yaml.safe_dump(launch))
    return copy


def test_slots_come_from_the_option_then_the_knob_then_the_machine(tmp_path):
    assert slots(KNOBS, "embedded", requested=3) == (3, "--parallel-runs 3")
    cores = len(os.sched_getaffinity(0))
    # auto: one run a usable core, capped by available memory / memory-per-run-gib
    roomy = load_knobs(knobs_with_parallel(tmp_path / "roomy", {"embedded": "auto", "memory-per-run-gib": 1e-3}))
    assert slots(roomy, "embedded")[0] == cores
    cramped = load_knobs(knobs_with_parallel(tmp_path / "cramped", {"embedded": "auto", "memory-per-run-gib": 1e6}))
    count, why = slots(cramped, "embedded")
    assert count == 1 and "auto" in why and f"{cores} usable cores" in why and "GiB a run" in why
    assert slots(KNOBS, "records")[0] == 1
    assert slots(KNOBS, "vime")[0] == 1
    assert slots(load_knobs(knobs_with_parallel(tmp_path, {"embedded": 5})), "embedded") == (5, "launch.yaml parallel.embedded = 5")


@pytest.mark.parametrize("value", [0, "many"])
def test_a_bad_parallel_knob_names_the_file_and_key(tmp_path, value):
    with pytest.raises(SpecError) as err:
        load_knobs(knobs_with_parallel(tmp_path, {"embedded": value}))
    text = "\n".join(err.value.problems)
    assert "launch.yaml" in text and "parallel.embedded" in text, text
