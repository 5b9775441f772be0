"""tools/run_time_split.py: a job's run time split into steps and the rest, read from real run
directories (VIME-format perf lines through the real parser), and projected onto a slower CPU."""

from __future__ import annotations

import importlib.util
import json
import sys

from harness import REPO_ROOT
from harness.records.rundir import RunDir
from tests.unit.conftest import vime_line, write_run

_spec = importlib.util.spec_from_file_location("run_time_split", REPO_ROOT / "tools" / "run_time_split.py")
run_time_split = importlib.util.module_from_spec(_spec)
sys.modules["run_time_split"] = run_time_split
_spec.loader.exec_module(run_time_split)


def _run(path, rung, step_times, started, ended, state="finished", true_on_policy=False):
    lines = [vime_line("perf", n, {"perf/step_time": value}) for n, value in enumerate(step_times)]
    write_run(path, {"run_id": path.name, "stage": "p1", "rung": rung, "mode": "colocate", "backend": "embedded", "flags": {}}, lines, state)
    run_dir = RunDir(path)
    run_dir.file(RunDir.EMBEDDED).write_text(json.dumps({"true_on_policy": true_on_policy}))
    run_dir.set_status(state, started=started, ended=ended)


def test_steps_and_rest_per_rung_and_the_projection(tmp_path, capsys):
    _run(tmp_path / "a", "near-aligned", [1.0, 2.0, 3.0], "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:10+00:00")
    _run(tmp_path / "b", "near-aligned", [4.0], "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:06+00:00")
    _run(tmp_path / "c", "true-on-policy", [2.0], "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:04+00:00", true_on_policy=True)

    assert run_time_split.main([str(tmp_path), "--job-wall", "1m0s", "--slots", "2", "--step-factor", "3", "--rest-factor", "1"]) == 0
    out = capsys.readouterr().out
    assert "| p1/near-aligned | 2 | 16 | 10 | 6 |" in out
    assert "| p1/true-on-policy (true on-policy) | 1 | 4 | 2 | 2 |" in out
    assert "| all | 3 | 20 | 12 | 8 |" in out
    # 60 s + (3 - 1) x 12 s of steps over 2 slots = 72 s
    assert "1 min 12 s (+0 min 12 s)" in out


def test_a_run_still_running_is_named_and_left_out(tmp_path, capsys):
    _run(tmp_path / "done", "top-p", [1.0], "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:03+00:00")
    _run(tmp_path / "busy", "top-k", [1.0], "2026-12-04T10:00:00+00:00", None, state="running")

    assert run_time_split.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| all | 1 | 3 | 1 | 2 |" in out
    assert "left out (not finished): busy: running" in out


def test_bad_input_is_one_error_line(tmp_path, capsys):
    assert run_time_split.main([str(tmp_path / "none")]) == 2
    assert run_time_split.main([str(tmp_path)]) == 2  # no finished run
    _run(tmp_path / "a", "top-p", [1.0], "2026-12-04T10:00:00+00:00", "2026-12-04T10:00:03+00:00")
    assert run_time_split.main([str(tmp_path), "--job-wall", "soon"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in errors] == ["error"] * 3
    assert "no finished run" in errors[1] and "'soon'" in errors[2]
