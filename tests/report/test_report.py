"""`python -m harness report`: builds the Allure 3 report, or says in one line what is missing."""

from __future__ import annotations

import shutil

import pytest
from sessions import run_session

from harness import REPO_ROOT
from harness.cli import main
from harness.report.report import MARKER, ReportError, allure_binary, check_results, prepare_output
from harness.report.single_file_fix import DECLARE_DATA_EARLY

needs_allure = pytest.mark.skipif(
    shutil.which("node") is None or not (REPO_ROOT / "node_modules" / ".bin" / "allure").exists(),
    reason="node or the npm package allure is not installed (python3 tools/setup_env.py installs both)",
)

ONE_ROW_TEST = """
from harness.report.summary import SummaryRow

def test_one_row(record_summary_row):
    record_summary_row(SummaryRow(run="baseline", hardware="CPU", mode="colocate", precision="BF16 train + FP8 rollout",
                                  operator_path="default", abs_diff_mean=0.0135, notes="mismatch baseline"))
"""


def test_missing_or_empty_results_are_one_line_errors(tmp_path):
    with pytest.raises(ReportError, match="no such results directory; run pytest with --alluredir="):
        check_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match=r"holds no \*-result.json"):
        check_results(tmp_path / "empty")


def test_cli_says_what_is_missing_without_a_traceback(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]


def test_output_folder_is_emptied_only_when_it_is_ours(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("someone's file")
    with pytest.raises(ReportError, match="not made by `python -m harness report`.*nothing was deleted"):
        prepare_output(foreign)
    assert (foreign / "keep.txt").read_text() == "someone's file"

    ours = tmp_path / "ours"
    prepare_output(ours)
    (ours / "index.html").write_text("old report")
    prepare_output(ours)
    assert sorted(p.name for p in ours.iterdir()) == [MARKER]


def test_missing_node_or_allure_is_named(tmp_path, monkeypatch):
    if shutil.which("node") is not None:
        with pytest.raises(ReportError, match="run `npm ci`"):
            allure_binary(tmp_path)  # a checkout without node_modules
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReportError, match="node not found on PATH"):
        allure_binary()


@needs_allure
def test_report_is_built_with_the_summary_beside_it(tmp_path, capsys):
    done = run_session(tmp_path, ONE_ROW_TEST, "--alluredir", str(tmp_path / "reports" / "allure-results"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "reports" / "allure-report"
    assert main(["report", "--results", str(tmp_path / "reports" / "allure-results"), "--out", str(out)]) == 0
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line == str(out / "index.html")
    assert (out / "index.html").stat().st_size > 100_000, "a single-file report embeds the app and its data"
    assert "test_one_row" in (out / "test-results.json").read_text()
    html = (out / "index.html").read_text()
    # single_file_fix.py: the data object exists before the app's script runs; no analytics tag.
    assert html.index(DECLARE_DATA_EARLY) < html.index('src="data:text/javascript') < html.index('d("widgets/')
    assert "googletagmanager" not in html and "gtag(" not in html
    assert (out / "summary.md").read_text() == (tmp_path / "reports" / "summary.md").read_text()
    # Built again into the same folder: the new report replaces the old one (facts: report-stack.md).
    assert main(["report", "--results", str(tmp_path / "reports" / "allure-results"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".html", ".md")) == ["index.html", "summary.md"]
