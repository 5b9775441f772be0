"""The planned runs made on a thread of their own (harness.launch.background): a caller waits for
its run only, a stop ends every run the batch started (each keeps what it logged), a failing batch
releases its waiters, and the pytest plugin puts the tests that need no run first. The runs are
the launcher tests' small real trainer process (printing_trainer.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from test_launcher import TRAINER, pid_alive  # the launcher tests' trainer and process check

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.launch.background import BackgroundBatch
from harness.launch.parallel import run_all
from harness.launch.runner import Cancelled, LaunchOptions, ensure_run
from harness.records.rundir import RunDir
from harness.spec import SpecError, load_knobs, resolve

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def spec(seed: int, rollouts: int):
    return resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded", {"num-rollout": rollouts, "seed": seed})


def batch_of(specs, runs_dir, slots: int) -> BackgroundBatch:
    def launch(cancel, on_ready):
        tasks = [lambda stop, s=s: ensure_run(s, LaunchOptions(runs_dir=runs_dir, trainer=TRAINER, progress=False, cancel=stop)) for s in specs]
        return run_all(tasks, slots, on_done=lambda index, error: on_ready(specs[index].run_id), cancel=cancel)

    return BackgroundBatch([s.run_id for s in specs], launch)


def test_a_caller_waits_for_its_run_only_and_a_stop_ends_the_rest_keeping_what_they_logged(tmp_path):
    short, endless = spec(51, 3), spec(52, 100_000)
    batch = batch_of([short, endless], tmp_path, slots=1).start()
    batch.wait_for([short.run_id])
    assert RunDir(tmp_path / short.run_id).load().status.state == "finished"
    assert batch.running, "the batch ended with its first run: the caller waited for the whole batch"
    metrics, deadline = tmp_path / endless.run_id / "metrics.jsonl", time.time() + 60
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 6) and time.time() < deadline:
        time.sleep(0.2)  # the endless run may not have its directory yet; three steps are six records
    assert metrics.exists(), "the batch's second run never logged"
    batch.stop()
    assert not batch.running
    assert isinstance(batch.error, Cancelled)
    stopped = RunDir(tmp_path / endless.run_id).load()
    assert stopped.status.state == "interrupted"
    assert len(stopped.steps()) >= 3
    assert not pid_alive(int((tmp_path / endless.run_id / "trainer.pid").read_text()))


def test_a_failing_batch_releases_its_waiters_and_keeps_the_reason(tmp_path):
    def launch(cancel, on_ready):
        raise SpecError("a spec VIME would reject")

    batch = BackgroundBatch(["never-made"], launch).start()
    batch.wait_for(["never-made"])
    assert not batch.running
    assert isinstance(batch.error, SpecError) and "VIME would reject" in str(batch.error)


def test_runs_side_by_side_in_the_background_are_waited_for_each(tmp_path):
    specs = [spec(seed, 4) for seed in (61, 62, 63)]
    batch = batch_of(specs, tmp_path, slots=2).start()
    batch.wait_for([s.run_id for s in specs])
    assert [RunDir(tmp_path / s.run_id).load().status.state for s in specs] == ["finished"] * 3
    batch.stop()
    assert batch.error is None


def test_with_a_plan_the_tests_that_need_no_run_go_first():
    # Real collection of a ladder file and a unit file, given in the other order on the command line.
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/ladder/test_ladder.py", "tests/unit/test_stats.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    unit = [i for i, node in enumerate(ids) if node.startswith("tests/unit/")]
    ladder = [i for i, node in enumerate(ids) if node.startswith("tests/ladder/")]
    assert unit and ladder
    assert max(unit) < min(ladder), "a test that asks for runs came before one that asks for none"


def test_an_xdist_controller_says_what_its_workers_made_when_it_moved(tmp_path):
    from fixtures.runs import SESSION_STARTED, WorkersRuns
    from harness.launch.status import session_counts

    def run_dir(name: str, state: str, started: str | None = None) -> None:
        made = RunDir(tmp_path / name).create()
        made.set_status(state, started=started)
        made.close()

    run_dir("reused", "finished", started="2026-01-01T00:00:00+00:00")  # from an earlier session: not made by this one
    run_dir("made", "finished")
    run_dir("busy", "running")
    lines: list[str] = []
    watch = WorkersRuns(tmp_path, lines.append, every_s=0)
    assert session_counts(tmp_path, SESSION_STARTED) == (1, 1)
    watch.pytest_runtest_logreport(None)
    watch.pytest_runtest_logreport(None)  # nothing moved: no second line
    run_dir("busy", "finished")
    watch.pytest_runtest_logreport(None)
    assert lines == [
        "[runs] this session: 1 made, 1 running (the workers launch them beside the tests)",
        "[runs] this session: 2 made, 0 running (the workers launch them beside the tests)",
    ]
