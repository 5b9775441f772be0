"""An ingested real-format VIME log, labelled, is what --backend=records judges."""

import subprocess
import sys
from pathlib import Path

from fixtures.runs import find_recorded_run
from harness import REPO_ROOT
from harness.records.rundir import RunDir

LOGS = Path(__file__).parent.parent / "data" / "vime_logs"


def test_a_labelled_ingest_is_found_by_rung_and_mode(tmp_path):
    log = sorted(LOGS.glob("*.log"))[0]
    out = subprocess.run([sys.executable, "-m", "harness", "ingest", str(log), "--out", str(tmp_path / "gb200-baseline"),
                          "--rung", "fp8-plus-filters", "--stage", "p1", "--mode", "colocate"],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode in (0, 2), out.stderr
    found = find_recorded_run(tmp_path, "no-such-id", "p1", "fp8-plus-filters", "colocate")
    assert found == tmp_path / "gb200-baseline"
    assert RunDir(found).load().spec.rung == "fp8-plus-filters"
    assert find_recorded_run(tmp_path, "no-such-id", "p1", "top-p", "colocate") is None
