"""pytest and the command line are two front ends of one Session: on the same recorded runs they
decide the same answers and write the same record, entry for entry and outcome for outcome.

The pytest side is the Makefile's baseline selection run as a real pytest session that launches
nothing (--find-only); the command-line side is `python -m harness judge`. Most checks fail alike
(their runs are not among the recorded ones); the fp32 floor and the judged answers it gives are
compared too, so the comparison is not one of two empty records.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest

from harness import REPO_ROOT
from harness.cli import main
from harness.report.experiment_record import differences, load_record
from tests.experiment.conftest import SEED_OFFSET

SELECTION = "p1 or acceptance or (p3 and ab)"


@pytest.fixture(scope="module")
def both(recorded, tmp_path_factory):
    runs, knobs = recorded
    common = [f"--runs-dir={runs}", f"--knobs={knobs}", f"--seed-offset={SEED_OFFSET}"]
    by_pytest = tmp_path_factory.mktemp("by-pytest")
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", SELECTION, "--mode=colocate"]
        + ["--find-only", f"--summary-dir={by_pytest}", *common],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    by_command = tmp_path_factory.mktemp("by-command")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["judge", *common, "--out", str(by_command)])
    return session, load_record(by_pytest / "experiment"), load_record(by_command / "experiment")


def test_the_two_records_agree_answer_for_answer(both):
    session, by_pytest, by_command = both
    assert by_pytest.outcomes, session.stdout[-3000:] + session.stderr[-3000:]
    assert differences(by_pytest, by_command) == []


def test_the_comparison_holds_judged_answers(both):
    _, by_pytest, _ = both
    floor = "tests/ladder/test_ladder.py::test_rung_against_parent[p1-fp32-floor]"
    assert by_pytest.outcomes[floor] == "passed"
    assert [r.rung for r in by_pytest.rungs] == ["fp32-floor"]
    assert {o for o in by_pytest.outcomes.values()} >= {"passed", "failed"}


def test_a_changed_answer_is_a_difference(both):
    _, by_pytest, by_command = both
    changed = by_command.model_copy(deep=True)
    changed.rungs[0].mean *= 2
    changed.outcomes[next(iter(changed.outcomes))] = "skipped"
    found = differences(by_pytest, changed)
    assert any(line.startswith("rungs: only in") for line in found) and any(line.startswith("outcome of") for line in found), found
