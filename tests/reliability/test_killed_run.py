"""A scheduler's SIGTERM to `harness run`: the real embedded trainer it started is stopped (its
whole process group), the run is recorded `interrupted` with the steps it logged, and nothing is
left running. One short real run (P0, three rollouts), stopped after its first step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import REPO_ROOT

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
        [sys.executable, "-m", "harness", "run", "--stage", "p0", "--rung", "fp8-plus-filters",
         "--set", "num-rollout=3", "--runs-dir", str(runs), "--rerun"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
