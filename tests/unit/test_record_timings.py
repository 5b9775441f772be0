"""tools/record_timings.py: the Timings table of docs/results.md is rewritten from a job's own
record (Allure results or JUnit XML written by real pytest sessions under pytester), one row per
job, the other rows kept; bad input is one error line."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

from harness import REPO_ROOT

pytest_plugins = ["pytester"]

_spec = importlib.util.spec_from_file_location("record_timings", REPO_ROOT / "tools" / "record_timings.py")
record_timings = importlib.util.module_from_spec(_spec)
sys.modules["record_timings"] = record_timings  # dataclasses look their module up there
_spec.loader.exec_module(record_timings)

SUITE = """
import pytest

def test_one():
    pass

def test_two_fails_on_purpose():  # the table must count a failure: this suite has one of each outcome
    pytest.fail("the pytester suite's failed outcome, on purpose")

@pytest.mark.skip(reason="not here")
def test_three():
    pass
"""


@pytest.fixture
def doc(tmp_path):
    page = tmp_path / "results.md"
    shutil.copy(REPO_ROOT / "docs" / "results.md", page)
    return page


def _row(doc, name):
    return record_timings.table_rows(doc.read_text(), doc)[name]


def test_the_committed_page_has_both_rows():
    rows = record_timings.table_rows((REPO_ROOT / "docs" / "results.md").read_text(), "docs/results.md")
    assert set(rows) == {"main job", "CI"}


def test_a_row_from_allure_results_replaces_its_job_and_keeps_the_other(pytester, doc):
    pytester.makepyfile(SUITE)
    results = pytester.path / "allure-results"
    pytester.runpytest_subprocess(f"--alluredir={results}", "-p", "allure_pytest")
    ci_before = _row(doc, "CI")
    code = record_timings.main(
        ["--job", "baseline", "--wall", "14m8s", "--allure-results", str(results), "--commit", "abc1234", "--date", "2026-12-03", "--doc", str(doc)]
    )
    assert code == 0
    row = _row(doc, "main job")
    assert row[2] == "14 min 8 s"
    assert row[3] == "1 passed, 1 failed, 1 skipped"
    assert row[4].endswith(" s") and row[5:7] == ["abc1234", "2026-12-03"]
    assert _row(doc, "CI") == ci_before
    # written again with the same figures, the page does not change (the table is regenerated whole)
    text = doc.read_text()
    record_timings.main(
        ["--job", "baseline", "--wall", "848", "--allure-results", str(results), "--commit", "abc1234", "--date", "2026-12-03", "--doc", str(doc)]
    )
    assert doc.read_text().replace(_row(doc, "main job")[4], "T") == text.replace(row[4], "T")


def test_a_row_from_junit_xml(pytester, doc):
    pytester.makepyfile(SUITE)
    junit = pytester.path / "junit.xml"
    pytester.runpytest_subprocess(f"--junitxml={junit}")
    assert record_timings.main(["--job", "ci", "--wall", "25m36s", "--junit", str(junit), "--commit", "abc1234", "--doc", str(doc)]) == 0
    assert _row(doc, "CI")[2:4] == ["25 min 36 s", "1 passed, 1 failed, 1 skipped"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--wall", "fast"], "--wall 'fast': expected a duration"),
        (["--wall", "1m", "--allure-results", "/nonexistent"], "no *-result.json files"),
        (["--wall", "1m", "--date", "yesterday"], "--date 'yesterday': expected YYYY-MM-DD"),
    ],
)
def test_bad_input_is_one_line(doc, capsys, args, message):
    text = doc.read_text()
    assert record_timings.main(["--job", "ci", "--commit", "abc1234", "--doc", str(doc), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert doc.read_text() == text


def test_a_page_without_the_table_is_refused(tmp_path, capsys):
    page = tmp_path / "results.md"
    page.write_text("# Results\n")
    assert record_timings.main(["--job", "ci", "--wall", "1m", "--commit", "x", "--doc", str(page)]) == 2
    assert "no timings table" in capsys.readouterr().err
