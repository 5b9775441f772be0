"""Warm start (harness.launch.warm): the embedded trainer forked from a pre-imported interpreter
must be the same run as one started cold, and must stop like one."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.launch.runner import LaunchOptions, ensure_run
from harness.launch.warm import WarmProcess, WarmStartUnavailable
from harness.spec import load_knobs, render_argv, resolve, validate
from harness.spec.backends import backend

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
STEP_LINE = re.compile(r"\] \S+:\d+ - (step \d+: .*)$")  # without the time stamp and source line


def spec(**overrides):
    return validate(resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded", overrides), KNOBS)


def step_lines(run_dir) -> list[str]:
    return [m.group(1) for line in run_dir.file("log.txt").read_text().splitlines() if (m := STEP_LINE.search(line))]


def test_a_warm_run_logs_exactly_what_a_cold_run_logs(tmp_path):
    runs = {}
    for warm in (False, True):
        options = LaunchOptions(runs_dir=tmp_path / ("warm" if warm else "cold"), progress=False, warm_start=warm)
        runs[warm] = ensure_run(spec(**{"num-rollout": 3}), options)
        assert runs[warm].read_status()["state"] == "finished", runs[warm].file("log.txt").read_text()[-2000:]
    log = runs[True].file("log.txt").read_text()
    assert "forked from a pre-imported interpreter" in log.splitlines()[0]
    cold, warm = step_lines(runs[False]), step_lines(runs[True])
    assert len(cold) == 3
    assert warm == cold  # every metric of every step, to the last printed digit


def test_stopping_a_warm_run_ends_its_trainer(tmp_path):
    command, cwd = backend("embedded").trainer_command(None)
    run_path = tmp_path / "run"
    (run_path / "dumps").mkdir(parents=True)
    argv = render_argv(spec(**{"num-rollout": 10_000}).flags) + backend("embedded").output_flags(run_path, {})
    source = WarmProcess(command + argv, cwd or REPO_ROOT, dict(os.environ, PYTHONUNBUFFERED="1"))
    lines, deadline = [], time.monotonic() + 300
    while time.monotonic() < deadline and sum("step " in line for line in lines) < 2:
        lines += source.poll(0.5)
        assert source.exit_code() is None, "".join(lines)[-2000:]
    assert sum("step " in line for line in lines) >= 2, "the warm trainer never logged two steps"
    source.stop()
    while source.exit_code() is None:  # the rest of its output, then its code
        source.poll(0.5)
    assert source.exit_code() != 0
    try:
        os.kill(source.pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive


def test_only_the_preloaded_modules_are_served(tmp_path):
    with pytest.raises(WarmStartUnavailable, match="harness.embedded.paired_score"):
        WarmProcess([sys.executable, "-m", "harness.cli", "report"], tmp_path, dict(os.environ))


def test_one_server_serves_every_test_of_a_session(tmp_path):
    # pytest rewrites PYTEST_CURRENT_TEST at each test's phases; a server per value paid the
    # imports again for every test that launched a run. A real import setting still splits them.
    from harness.launch.warm import _key

    base = dict(os.environ, PYTEST_CURRENT_TEST="tests/a.py::test_a (setup)")
    later = dict(base, PYTEST_CURRENT_TEST="tests/b.py::test_b (call)")
    assert _key(base, tmp_path) == _key(later, tmp_path)
    # A value the session's own environment does not already hold (it may run under AVX2 settings).
    other_isa = "AVX512_CORE" if base.get("ONEDNN_MAX_CPU_ISA") == "AVX2" else "AVX2"
    assert _key(base, tmp_path) != _key(dict(base, ONEDNN_MAX_CPU_ISA=other_isa), tmp_path)


def test_closing_the_launcher_end_ends_the_server(tmp_path):
    # The launcher's reader thread sits in recv on the socket; a bare close() under it sent no EOF,
    # so close() waited its 10 s and killed the server (or, without close(), the server outlived the
    # launcher). Exit code 0 is the server leaving on its own; SIGKILL would be -9.
    from harness.launch.warm import _Server

    server = _Server(dict(os.environ, LAB_WARM_START_TEST="own-server"), REPO_ROOT)  # a server of its own, not the session's
    server.close()
    assert server._proc.returncode == 0
