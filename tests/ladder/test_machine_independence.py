"""Machine independence (issue 14): the P1 ladder's verdicts must not depend on the CPU's numeric
setting. tools/machine_check.py judges the ladder under the default setting (this session's runs
directory, so the ladder's own runs are judged again, not rerun) and runs it again under a second
setting (oneDNN limited to AVX2, one OpenMP thread), then compares every rung's direction and class.

It costs a whole second ladder, so it runs only with --machine-check; without it the test is
skipped and says so: not checked, never passed. docs/statistics.md records the last comparison.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.options import MACHINE_CHECK, RUNS_DIR
from harness import REPO_ROOT


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
    differing = [row for row in result["rungs"] if not row["same_verdict"]]
    table = (tmp_path / "comparison.md").read_text()
    assert result["rungs"] and not differing, f"verdicts differ under {result['second_setting']}:\n{table}"
