"""`python -m harness judge --runs-dir DIR` on real recorded runs (tests/experiment/conftest.py),
without pytest's run fixtures.

The recorded runs' ids carry the trainer's code version of the day, so the command finds them by
the hash of their resolved flags, as it finds any run recorded before a harness-only change. Every
other run the main job needs is missing: each check that needs one fails with the lookup's line,
and the record and page are still written with what was judged.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.cli import main
from harness.experiment.runs import RunNotFound, RunSource
from harness.judge.verdict import after_warmup
from harness.records.metric_names import ABS_DIFF
from harness.report.experiment_record import load_record
from harness.spec import load_knobs
from tests.experiment.conftest import SEED_OFFSET

FLOOR_RUN = "embedded-colocate-e0400d811b32"  # p1 fp32-floor, seed 2026 + 100
LADDER = "tests/ladder/test_ladder.py::test_rung_against_parent"


@pytest.fixture(scope="module")
def judged(recorded, tmp_path_factory):
    """The command run once on the recorded runs."""
    import contextlib
    import io

    runs, knobs = recorded
    out = tmp_path_factory.mktemp("judged")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main(["judge", "--runs-dir", str(runs), "--knobs", str(knobs), "--seed-offset", SEED_OFFSET, "--out", str(out)])
    return status, printed.getvalue().splitlines(), load_record(out / "experiment"), out, runs


def test_the_recorded_root_is_judged_and_recorded(judged):
    status, lines, record, _, runs = judged
    assert record.outcomes[f"{LADDER}[p1-fp32-floor]"] == "passed", lines
    [floor] = [r for r in record.rungs if r.rung == "fp32-floor"]
    assert floor.run_id == FLOOR_RUN and floor.parent is None
    # The recorded mean is the run's own abs-diff after the warm-up, read here from its metrics.
    knobs = load_knobs(DEFAULT_KNOBS_DIR)
    run = RunSource(knobs, "embedded", runs, seed_offset=100, find_only=True)("p1", "fp32-floor", "colocate")
    warmup = int(knobs.threshold("warmup_steps"))
    assert floor.mean == pytest.approx(float(np.mean(after_warmup(run.series(ABS_DIFF), warmup)[1])))
    assert [e.run_id for e in record.environment] == [FLOOR_RUN], "the ladder root's environment and argv"
    assert record.session.options.front_end == "python -m harness judge"


def test_checks_whose_runs_are_missing_fail_with_one_line_each(judged):
    status, lines, record, _, _ = judged
    assert status == 1
    failed = [line for line in lines if line.startswith("FAILED")]
    assert failed and any("near-aligned" in line for line in failed) and any("test_criterion" in line for line in failed)
    for index, line in enumerate(lines):
        if line.startswith("FAILED") and "near-aligned-low-and-stable" in line:
            # judged, not missing: the recorded runs hold one near-aligned seed, and one seed's side carries
            # the design's seed variance (harness.judge.variance.side_estimate), which the stability bound reads
            assert "side CI half-width" in " ".join(lines[index + 1 : index + 4]), "\n".join(lines[index : index + 6])
        elif line.startswith("FAILED"):
            assert "no recorded run for rung" in lines[index + 1], "\n".join(lines[index : index + 6])
    # The near-aligned run is there; the other members of its Holm family are what is missing.
    near = lines[lines.index(f"FAILED  {LADDER}[p1-near-aligned]") + 1]
    assert "'near-aligned'" not in near and "'fp32-floor'" not in near, near


def test_the_page_and_summary_are_written_and_named_last(judged):
    _, lines, _, out, _ = judged
    page = out / "experiment" / "index.html"
    assert lines[-1] == str(page) and page.is_file() and "fp32-floor" in page.read_text()
    assert "fp32-floor" in (out / "summary.md").read_text()


def test_a_find_only_source_launches_nothing_and_says_what_is_missing(tmp_path):
    source = RunSource(load_knobs(DEFAULT_KNOBS_DIR), "embedded", tmp_path, find_only=True)
    with pytest.raises(RunNotFound) as err:
        source("p1", "top-p", "colocate")
    assert len(err.value.problems) == 1 and "top-p" in err.value.problems[0] and str(tmp_path) in err.value.problems[0]
    assert not any(tmp_path.iterdir()), "nothing was launched or written"


def test_a_missing_runs_directory_is_one_error_line(tmp_path, capsys):
    assert main(["judge", "--runs-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "--runs-dir" in err[0]


def test_the_sites_runs_dir_is_where_the_command_looks(tmp_path, capsys):
    site = tmp_path / "site.yaml"
    site.write_text(f"runs-dir: {tmp_path / 'shared-runs'}\n")
    assert main(["judge", "--site", str(site), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "shared-runs") in err[0], err


def test_the_command_judges_the_checks_the_main_jobs_pytest_session_collects():
    """The Makefile's baseline selection, as pytest collects it, is the command's list of checks plus
    the test files it names as not judged here (with the reason): a test renamed, added or dropped on
    one side, or a new test file in the selection, shows here."""
    import subprocess
    import sys

    from harness import REPO_ROOT
    from harness.experiment.main_job import NOT_JUDGED_HERE, main_job_checks

    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", "p1 or acceptance or (p3 and ab)", "--mode=colocate"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    nodeids = {line for line in collected.stdout.splitlines() if "::" in line}
    assert nodeids, collected.stdout[-2000:] + collected.stderr[-2000:]
    judged_elsewhere = {nodeid for nodeid in nodeids if any(nodeid.startswith(prefix) for prefix in NOT_JUDGED_HERE)}
    assert {nodeid for nodeid, _, _ in main_job_checks(load_knobs(DEFAULT_KNOBS_DIR), "embedded")} == nodeids - judged_elsewhere
