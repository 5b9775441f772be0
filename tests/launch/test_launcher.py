"""The launcher with a small real trainer process: streaming, status, time limit, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.launch.runner import LaunchOptions, ensure_run
from harness.records.rundir import RunDir
from harness.spec import load_knobs, resolve

TRAINER = (sys.executable, str(Path(__file__).parent / "printing_trainer.py"))
KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def spec(**overrides):
    return resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded", overrides)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_finished_run_is_recorded_and_reused(tmp_path):
    options = LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False)
    run_dir = ensure_run(spec(**{"num-rollout": 3}), options)
    run = run_dir.load()
    assert run.status.state == "finished" and run.steps() == [0, 1, 2]
    assert run.argv[2:4] == ["--hf-checkpoint", "embedded://model/qwen3-tiny"]
    assert (run_dir.path / "environment.json").exists() and run.environment["harness"]["commit"]
    first_mtime = run_dir.file("status.json").stat().st_mtime
    again = ensure_run(spec(**{"num-rollout": 3}), options)
    assert again.path == run_dir.path and again.file("status.json").stat().st_mtime == first_mtime
    # Rerun options made as `python -m harness run --rerun` makes them (the session starts with them):
    # the earlier run is launched again, and the run this session finished is then reused.
    rerun_options = LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False, rerun=True)
    rerun = ensure_run(spec(**{"num-rollout": 3}), rerun_options)
    rerun_mtime = rerun.file("status.json").stat().st_mtime
    assert rerun_mtime > first_mtime
    assert ensure_run(spec(**{"num-rollout": 3}), rerun_options).file("status.json").stat().st_mtime == rerun_mtime


def test_a_failing_run_keeps_its_steps_and_names_the_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINTING_TRAINER_FAIL", "1")
    run = ensure_run(spec(**{"num-rollout": 4}), LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False)).load()
    assert run.status.state == "failed" and run.status.exit_code == 1
    assert run.status.failure.signature == "cuda-oom"
    assert run.steps() == [0, 1, 2, 3]


def test_a_refused_run_names_the_trainers_error_line(tmp_path, monkeypatch):
    # A trainer that refuses its input exits with no failure signature; the one line saying why is the failure's text.
    monkeypatch.setenv("PRINTING_TRAINER_REFUSE", "--embedded-inject x: expected one of ...")
    run = ensure_run(spec(**{"num-rollout": 2}), LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False)).load()
    assert run.status.state == "failed" and run.status.exit_code == 2
    failure = run.status.failure
    assert failure.signature == "nonzero-exit" and failure.line == 2, failure
    assert failure.text == "trainer exited with code 2: error: --embedded-inject x: expected one of ...", failure.text


def test_a_clean_exit_before_the_last_rollout_is_unfinished_not_finished(tmp_path, monkeypatch):
    # No end line is required from VIME: the run's records must cover every rollout it was launched with.
    monkeypatch.setenv("PRINTING_TRAINER_STOP_AFTER", "2")
    run = ensure_run(spec(**{"num-rollout": 4}), LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False)).load()
    assert run.status.state == "unfinished" and run.status.exit_code == 0
    assert "unfinished at rollout 2 of 4" in (run.status.note or ""), run.status


def test_the_time_limit_stops_the_trainer_and_keeps_what_it_logged(tmp_path):
    # The limit must leave a loaded machine time to start the trainer: at 2 s a CI run beside the suite's
    # other workers logged no step at all (a bare interpreter's start took the whole limit), so the test
    # asserted the machine's speed, not the launcher. 20 s holds 100 of the stand-in's 0.2 s steps.
    run_dir = ensure_run(spec(**{"num-rollout": 10_000}), LaunchOptions(runs_dir=tmp_path, trainer=TRAINER, progress=False, timeout_s=20.0))
    run = run_dir.load()
    assert run.status.state == "interrupted" and run.status.failure.signature == "timeout"
    assert len(run.steps()) >= 3
    assert not pid_alive(int((run_dir.path / "trainer.pid").read_text()))


def test_ctrl_c_stops_only_the_trainer_it_started_and_marks_the_run_interrupted(tmp_path):
    script = (
        "import sys; from pathlib import Path\n"
        "from harness.launch.runner import LaunchOptions, ensure_run\n"
        "from harness.spec import load_knobs, resolve\n"
        "k = load_knobs(Path('knobs'))\n"
        "s = resolve(k, 'p1', 'near-aligned', 'colocate', 'embedded', {'num-rollout': 10000})\n"
        f"ensure_run(s, LaunchOptions(runs_dir=Path({str(tmp_path)!r}), trainer={TRAINER!r}, progress=False))\n"
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        run_path = None
        while time.time() < deadline:
            found = [p for p in tmp_path.iterdir() if p.is_dir()]
            if found and (found[0] / "metrics.jsonl").exists() and len((found[0] / "metrics.jsonl").read_text().splitlines()) >= 6:
                run_path = found[0]
                break
            time.sleep(0.2)
        assert run_path is not None, "the trainer never logged three steps"
        harness.send_signal(signal.SIGINT)
        harness.wait(timeout=40)
        run = RunDir(run_path).load()
        assert run.status.state == "interrupted"
        assert len(run.steps()) >= 3
        assert not pid_alive(int((run_path / "trainer.pid").read_text()))
        assert bystander.poll() is None, "the launcher must not touch processes it did not start"
    finally:
        bystander.kill()
        if harness.poll() is None:
            harness.kill()
