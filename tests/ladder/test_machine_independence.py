"""Machine independence (issue 14): the P1 ladder's verdicts must not depend on the CPU's numeric
setting. tools/machine_check.py judges the ladder under the default setting (this session's runs
directory, so the ladder's own runs are judged again, not rerun) and runs it again under a second
setting (oneDNN limited to AVX2, one OpenMP thread), then compares every rung's verdict: its
expectation result, its drift class, and its direction where the interval decided one.

The comparison itself is tested here on made-up records (no run). The whole check costs a second
ladder, so it runs only with --machine-check; without it that test is skipped and says so: not
checked, never passed. docs/statistics.md records the last comparison and why an inconclusive
direction against a decided one is a difference in decisiveness, not a contradiction.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.options import MACHINE_CHECK, RUNS_DIR
from harness import REPO_ROOT


def _tool():
    spec = importlib.util.spec_from_file_location("machine_check", REPO_ROOT / "tools" / "machine_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(direction: str, drift_class: str = "none", expectation: str = "met", ruled_out: tuple[str, ...] = ()) -> dict:
    return {
        "observed_direction": direction,
        "decided_class": drift_class,
        "expectation": expectation,
        "mean": 1e-3,
        "delta": 0.0,
        "ruled_out": dict.fromkeys(ruled_out, "evidence"),
    }


# The temperature rung under the two settings of issue 14: class none (not up) by default; under the
# second setting too noisy to decide, with framework and semantic drift ruled out by probes 1, 2 and 6.
TEMPERATURE_UNDECIDED = _entry("inconclusive", "undetermined", ruled_out=("framework", "semantic"))


@pytest.mark.parametrize(
    ("default", "second", "agree", "difference"),
    [
        (_entry("up", "semantic"), _entry("up", "semantic"), True, ""),
        (_entry("inconclusive"), _entry("flat"), True, "decisiveness: inconclusive vs flat"),
        (_entry("up", "semantic"), _entry("inconclusive", "semantic"), True, "decisiveness: up vs inconclusive"),
        (_entry("up"), _entry("flat"), False, "direction up vs flat"),
        (_entry("up"), _entry("down"), False, "direction up vs down"),
        (_entry("up", "expected-numerical"), _entry("up", "framework"), False, "class expected-numerical vs framework"),
        (_entry("flat"), _entry("inconclusive", expectation="not met"), False, "expectation met vs not met"),
        (_entry("flat", expectation="unknown"), _entry("flat", expectation="unknown"), False, "expectation unknown vs unknown"),
        (_entry("flat"), None, False, "judged under one setting only"),
        (_entry("inconclusive"), TEMPERATURE_UNDECIDED, True, "decisiveness: class none vs undetermined"),
        (
            _entry("up", "expected-numerical"),
            TEMPERATURE_UNDECIDED,
            True,
            "decisiveness: class expected-numerical vs undetermined; decisiveness: up vs inconclusive",
        ),
        (_entry("up", "semantic"), TEMPERATURE_UNDECIDED, False, "class semantic vs undetermined"),
        (_entry("up", "undecided"), TEMPERATURE_UNDECIDED, False, "class undecided vs undetermined"),
    ],
)
def test_a_verdict_is_expectation_class_and_decided_direction(default, second, agree, difference):
    rows, same = _tool().compare({"rung": default}, {"rung": second} if second else {})
    assert (rows[0]["agree"], rows[0]["difference"]) == (agree, difference)
    assert same is agree


def test_a_session_with_no_verdicts_never_passes():
    assert _tool().compare({}, {}) == ([], False)


def test_the_rung_test_outcome_is_read_from_junit_results(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.ladder.test_ladder" name="test_rung_against_parent[p1-top-k]"/>'
        '<testcase classname="tests.ladder.test_ladder" name="test_rung_against_parent[p1-tis]"><failure message="x"/></testcase>'
        '<testcase classname="tests.ladder.test_ladder" name="test_rung_against_parent[p1-fp32-floor]"><skipped message="x"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert _tool().junit_outcomes(junit) == {
        "test_rung_against_parent[p1-top-k]": "met",
        "test_rung_against_parent[p1-tis]": "not met",
        "test_rung_against_parent[p1-fp32-floor]": "not checked",
    }


@pytest.mark.ladder
def test_p1_verdicts_are_the_same_under_a_second_cpu_numeric_setting(pytestconfig, tmp_path):
    if not pytestconfig.getoption(MACHINE_CHECK):
        pytest.skip("not checked: the second-setting ladder runs only with --machine-check (tools/machine_check.py)")
    runs = Path(pytestconfig.getoption(RUNS_DIR)).resolve()
    command = [sys.executable, "tools/machine_check.py", "--stage", "p1", "--runs-dir", str(runs), "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    comparison = tmp_path / "comparison.json"
    assert comparison.exists(), f"the check made no comparison (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    result = json.loads(comparison.read_text())
    contradicting = [row for row in result["rungs"] if not row["agree"]]
    table = (tmp_path / "comparison.md").read_text()
    assert result["rungs"] and not contradicting, f"verdicts contradict under {result['second_setting']}:\n{table}"
