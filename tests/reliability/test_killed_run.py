"""A scheduler's SIGTERM to `harness run`: the real embedded trainer it started is stopped (its
whole process group), the run is recorded `interrupted` with the steps it logged, and nothing is
left running. One real run (P0, a thousand rollouts, so that it cannot end before the signal
comes however fast the machine), stopped after its first step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import REPO_ROOT
from tests.launch.test_launcher import pid_alive  # the launcher tests' process check

FIRST_STEP_WITHIN_S = 420  # model build + engine start + one rollout on a busy 2-core machine


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_the_trainer_and_marks_the_run_interrupted(tmp_path: Path):
    runs = tmp_path / "runs"
    harness = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--stage",
            "p0",
            "--rung",
            "fp8-plus-filters",
            "--set",
            "num-rollout=1000",  # long enough that the run cannot end before the signal
            "--runs-dir",
            str(runs),
            "--rerun",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    trainer_pgid = None
    try:
        deadline = time.monotonic() + FIRST_STEP_WITHIN_S
        run_path = None
        while time.monotonic() < deadline and harness.poll() is None:
            for metrics in runs.glob("*/metrics.jsonl") if runs.exists() else []:
                if any(json.loads(line)["kind"] == "step" for line in metrics.read_text().splitlines() if line.endswith("}")):
                    run_path = metrics.parent
            if run_path:
                break
            time.sleep(0.5)
        assert run_path is not None, f"no step logged within {FIRST_STEP_WITHIN_S} s (harness exit {harness.poll()})"
        trainer_pgid = json.loads((run_path / "trainer.json").read_text())["pgid"]
        harness.send_signal(signal.SIGTERM)
        _, err = harness.communicate(timeout=90)
        assert harness.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "Traceback" not in err and "terminated by SIGTERM" in err
        status = json.loads((run_path / "status.json").read_text())
        assert status["state"] == "interrupted" and status["ended"]
        assert status["steps_logged"] >= 1 and "steps logged are kept" in status["note"]
        assert not group_alive(trainer_pgid), "the trainer's process group outlived the harness"
        assert "# interrupted (SIGTERM" in (run_path / "log.txt").read_text()
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        if trainer_pgid is not None and group_alive(trainer_pgid):
            os.killpg(trainer_pgid, signal.SIGKILL)  # only the group this test's harness started


PYTEST_SESSION = """
import sys
from pathlib import Path
from harness import DEFAULT_KNOBS_DIR
from harness.launch.runner import LaunchOptions, ensure_run
from harness.spec import load_knobs, resolve

TRAINER = (sys.executable, {trainer!r})

def test_a_long_run():
    spec = resolve(load_knobs(DEFAULT_KNOBS_DIR), "p1", "near-aligned", "colocate", "embedded", {{"num-rollout": 100000}})
    ensure_run(spec, LaunchOptions(runs_dir=Path({runs!r}), trainer=TRAINER, progress=False))

def test_never_started_after_sigterm():
    Path({marker!r}).write_text("ran")
"""


def test_sigterm_to_pytest_stops_the_fixture_trainer_and_ends_the_session(tmp_path: Path):
    """The pytest side calls the same launch: SIGTERM stops its trainer, records the run and ends
    the session as Ctrl-C would (the next test never starts)."""
    runs, marker = tmp_path / "runs", tmp_path / "second-test-ran"
    trainer = REPO_ROOT / "tests" / "launch" / "printing_trainer.py"
    (tmp_path / "test_session.py").write_text(PYTEST_SESSION.format(trainer=str(trainer), runs=str(runs), marker=str(marker)))
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path / "test_session.py")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        deadline = time.monotonic() + 60
        metrics = []
        while time.monotonic() < deadline and not metrics:
            metrics = [m for m in runs.glob("*/metrics.jsonl") if m.stat().st_size > 200] if runs.exists() else []
            time.sleep(0.2)
        assert metrics, "the fixture's trainer never logged"
        run_path = metrics[0].parent
        session.send_signal(signal.SIGTERM)
        out, _ = session.communicate(timeout=60)
        status = json.loads((run_path / "status.json").read_text())
        assert status["state"] == "interrupted" and status["steps_logged"] >= 1, out[-2000:]
        assert not group_alive(json.loads((run_path / "trainer.json").read_text())["pgid"])
        assert not marker.exists(), "pytest went on to the next test after SIGTERM"
        assert session.returncode == 2, out[-2000:]  # pytest's "interrupted"
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()


SESSION_TEST = """
import os
from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec.backends import backend
from harness.launch.warm import run_to_end
from harness.spec import load_knobs, render_argv, resolve


def test_a_trainer_that_never_ends():
    run_path = Path(os.environ["KILLED_SESSION_RUN"])
    (run_path / "dumps").mkdir(parents=True)
    knobs = load_knobs(DEFAULT_KNOBS_DIR)
    flags = resolve(knobs, "p1", "near-aligned", "colocate", "embedded", {"num-rollout": 10_000}).flags
    command, cwd = backend("embedded").trainer_command(None)
    run_to_end(command + render_argv(flags) + backend("embedded").output_flags(run_path, {}), cwd or REPO_ROOT, dict(os.environ), timeout=3600)
"""


def descendants(pid: int) -> set[int]:
    """Every living process under pid (by /proc's parent links), its own sessions included."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_sigterm_to_a_pytest_session_stops_the_trainer_a_test_forked(tmp_path: Path):
    """The same signal to a pytest session whose test waits on a warm trainer (the embedded tests'
    `trainer` fixture does): the trainer, forked by the pre-imported interpreter in a session of its
    own, is stopped, not left running without its launcher (the plugin's session-wide signal
    handling, fixtures/runs.py, and harness.launch.warm.run_to_end)."""
    (tmp_path / "test_session.py").write_text(SESSION_TEST)
    run_path = tmp_path / "run"
    session = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "fixtures.options",
            "-p",
            "fixtures.knobs",
            "-p",
            "fixtures.runs",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env=dict(os.environ, KILLED_SESSION_RUN=str(run_path), PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    under = set()
    try:
        deadline = time.monotonic() + FIRST_STEP_WITHIN_S
        while time.monotonic() < deadline and session.poll() is None and not list((run_path / "dumps").glob("rollout_*.pt")):
            time.sleep(0.5)
        under = descendants(session.pid)  # the pre-imported interpreter and the trainer it forked
        assert session.poll() is None and len(under) >= 2, f"no rollout within {FIRST_STEP_WITHIN_S} s: {session.communicate()[0][-2000:]}"
        session.send_signal(signal.SIGTERM)
        out, _ = session.communicate(timeout=90)
        assert "Terminated" in out or "SIGTERM" in out, out[-2000:]
        deadline = time.monotonic() + 30  # the server ends once its launcher's end closes
        while time.monotonic() < deadline and any(pid_alive(pid) for pid in under):
            time.sleep(0.5)
        assert not [pid for pid in under if pid_alive(pid)], "a process the session started outlived it"
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
        for pid in under:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)  # only what this test's session started
