"""The experiment page (what a reviewer opens first), checked as a reviewer meets it: a record built from runs judged
by the real judge, the page drawn from it, opened in headless Chromium at 1400 x 1000. Every row
of the seed's table, the ladder figure and all five A/B answers must end on that first screen;
the screenshot is kept as an Allure attachment; the file stays under 2 MB. And a pytest session
writes the record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import allure
import pytest
from experiment_sample import build_sample_record
from sessions import HERE, run_session

from harness import REPO_ROOT
from harness.cli import main
from harness.report import experiment_record as entries
from harness.report.command import build_experiment_page
from harness.report.experiment_page import MAX_BYTES, ROW_HEADERS
from harness.report.experiment_record import SEED_QUESTIONS, add_entry, load_record, new_record, write_record
from harness.report.record_model import AbAnswer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make test` installs Debian's chromium as root: setup_env.py --browser)"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (REPO_ROOT / "node_modules" / "playwright-core").is_dir(),
        reason="playwright-core is not installed: run `npm ci` (package.json devDependencies)",
    ),
]


@pytest.fixture(scope="module")
def record_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("experiment")
    record = build_sample_record(root / "runs")
    return write_record(record, root / "reports" / "experiment").parent


def open_page(index, shot) -> dict:
    done = subprocess.run(
        ["node", str(HERE / "browse_experiment.mjs"), str(index), str(shot)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "CHROMIUM": CHROMIUM or ""},
    )
    lines = done.stdout.strip().splitlines()
    found = json.loads(lines[-1]) if lines else {"error": done.stderr[-500:]}
    assert done.returncode == 0 and "error" not in found, found.get("error") or done.stderr[-2000:]
    return found


def needs_a_browser(test):
    for mark in needs_browser:
        test = mark(test)
    return test


@needs_a_browser
def test_first_screen_shows_table_figure_and_answers(record_dir, tmp_path):
    page_path = tmp_path / "experiment" / "index.html"

    index = build_experiment_page(record_dir, page_path)
    size = index.stat().st_size
    assert size < MAX_BYTES, f"{index} is {size} bytes; the page must stay under {MAX_BYTES}"

    found = open_page(index, tmp_path / "experiment-first-screen.png")
    allure.attach.file(found["screenshot"], name="experiment page, first screen (1400 x 1000)", attachment_type=allure.attachment_type.PNG)
    height = found["viewport"]["height"]
    record = load_record(record_dir)

    # The seed's table: every row of the record, in order, each wholly on the first screen.
    assert found["summary"]["headers"] == list(ROW_HEADERS)
    assert [row["cells"][0] for row in found["summary"]["rows"]] == [row.run for row in record.rows]
    for shown, row in zip(found["summary"]["rows"], record.rows):
        assert shown["bottom"] <= height, f"row {row.run!r} ends at {shown['bottom']:.0f} px, below the first screen ({height} px)"
        assert f"{row.abs_diff_mean:.4g}" in shown["cells"][6], f"{row.run}: abs-diff mean {row.abs_diff_mean:.4g} not in {shown['cells'][6]!r}"
        assert shown["cells"][9] == "1", "one run per rung: the page says so"
    assert found["scrollWidth"] <= found["viewport"]["width"], "the page must not scroll sideways at 1400 px"

    # The ladder figure: drawn (marks, every judged rung named) and wholly on the first screen.
    figure = found["figure"]
    assert figure and figure["width"] > 400 and figure["height"] > 200, figure
    assert figure["bottom"] <= height, f"the ladder figure ends at {figure['bottom']:.0f} px, below the first screen"
    assert figure["marks"] > 20
    for rung in record.rungs:
        assert rung.rung in figure["text"], f"rung {rung.rung} is not labelled in the figure"
    assert "fp32 floor" in figure["text"] and "near-aligned floor" in figure["text"]

    # The A/B: the contract, then the seed's five questions in order, each ending on the first
    # screen with its verdict and its answer (the figures are in the message); evidence folded.
    assert len(found["ab"]) == 1 + len(SEED_QUESTIONS)
    assert "Same workload (contract)" in found["ab"][0]["text"]
    answers = {a.key: a for a in record.ab}
    answered = 0
    for (key, question), shown in zip([("contract", "Same workload (contract)"), *SEED_QUESTIONS], found["ab"]):
        assert question in shown["text"], f"expected {question!r} first, got {shown['text']!r}"
        assert shown["bottom"] <= height, f"{question!r} ends at {shown['bottom']:.0f} px, below the first screen ({height} px)"
        answer = answers.get(key)
        if answer is None:
            assert "not answered" in shown["shown"], shown["shown"]
            continue
        assert answer.message[:60] in shown["shown"], f"{question!r}: answer {answer.message[:60]!r} not shown in {shown['shown']!r}"
        assert shown["folded"], f"{question!r}: the evidence must start folded"
        if key != "contract":
            answered += 1
            gate = "yes" if answer.passed else "no"
            assert f"{record.outcomes[answer.test.nodeid]} {gate}" in shown["shown"], shown["shown"]
    assert answered >= 3, "the sample answers drift, reward and timings: the check must see real answers"
    shutil.copyfile(found["screenshot"], REPO_ROOT / "reports" / "experiment-page-screenshot.png")


def test_compare_and_bad_paths_are_one_line(record_dir, tmp_path, capsys):
    out = tmp_path / "compare" / "index.html"
    assert main(["report", "--compare", str(record_dir), str(record_dir), "--page-out", str(out)]) == 0
    page = out.read_text()
    assert "Δ vs baseline record" in page and "no clear change (intervals overlap)" in page  # a record against itself
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out)

    assert main(["report", "--compare", str(tmp_path / "nope"), str(record_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "experiment.json" in err[0], err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "experiment.json").write_text('{"schema": 1, "rows": {}}')
    assert main(["report", "--compare", str(record_dir), str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "key 'rows': expected a valid list" in err[0], err


# A session as the ladder and the A/B run one: runs written by the real writers, judged by the real
# judge, recorded through the experiment_record fixture. One rung test fails its assertion after
# recording, so the record must say "failed" for it.
SESSION = """
import pytest
from runbuilder import make_run, noisy, perf_series, resolved_spec
from fixtures.knobs import RungCase
from harness.experiment.evidence import judge_rung

LEVELS = {"fp32-floor": 2e-6, "near-aligned": 0.0135}

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for i, (rung, level) in enumerate(LEVELS.items()):
        spec = resolved_spec("p1", rung)
        steps = int(spec["flags"]["num-rollout"])
        out[rung] = make_run(root, rung, spec, abs_diff=noisy(level, steps, i), reward=noisy(0.4, steps, 10 + i), perf=perf_series(steps, 20 + i))
    return out

@pytest.mark.parametrize("rung", list(LEVELS))
def test_rung(rung, runs, knobs, experiment_record):
    case = RungCase("p1", knobs.rungs[rung], "colocate", "embedded")
    judgement = judge_rung(case.rung, knobs, lambda rid, **_: runs[rid])
    experiment_record.rung(case, judgement, runs[rung], runs[case.rung.parent] if case.rung.parent else None)
    assert rung != "near-aligned", "this one fails on purpose"

def test_ab(runs, experiment_record):
    pair = (runs["fp32-floor"], runs["near-aligned"])
    experiment_record.ab_rows(pair)
    experiment_record.ab("Does the candidate reduce it?", pair, passed=False, message="abs-diff up", evidence={"ci": [0.01, 0.02]}, key="drift-reduced")
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_session_writes_the_experiment_record(tmp_path, workers):
    if workers:
        pytest.importorskip("xdist")
    done = run_session(tmp_path, SESSION, "-p", "fixtures.experiment", "--mode=colocate", "--backend=embedded", *workers)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]  # the one deliberate failure
    record = load_record(tmp_path / "reports" / "experiment")
    assert sorted(r.rung for r in record.rungs) == ["fp32-floor", "near-aligned"]
    rungs = {r.rung: r for r in record.rungs}
    child = rungs["near-aligned"]
    assert child.parent == "fp32-floor" and child.delta is not None and child.delta_ci[0] <= child.delta <= child.delta_ci[1]
    assert child.decided_class and child.observed_direction == "up"
    outcomes = record.outcomes
    assert outcomes[child.test.nodeid] == "failed" and outcomes[rungs["fp32-floor"].test.nodeid] == "passed"
    # The rows are the session's summary table: the same runs and means as summary.csv.
    csv_lines = (tmp_path / "reports" / "summary.csv").read_text().splitlines()[1:]
    assert len(record.rows) == len(csv_lines) == 4
    assert {r.run for r in record.rows} == {line.split(",")[0] for line in csv_lines}
    [answer] = record.ab
    assert answer.key == "drift-reduced" and answer.passed is False and outcomes[answer.test.nodeid] == "passed"
    # The ladder root is also the A/B baseline here: one environment entry per run (labelled by
    # whichever test recorded it first; under xdist that order is the workers').
    assert [e.run_id for e in record.environment] == [rungs["fp32-floor"].run_id]
    assert record.environment[0].argv, "the baseline's exact argv is recorded"
    assert record.worst_tokens is None, "runs without token dumps have no worst tokens, and none are invented"


ONE_ROW_TEST = """
from harness.report.summary import SummaryRow

def test_one_row(record_summary_row):
    record_summary_row(SummaryRow(run="baseline", hardware="CPU", mode="colocate", precision="BF16 train + FP8 rollout", operator_path="default"))
"""


@pytest.mark.skipif(
    shutil.which("node") is None or not (REPO_ROOT / "node_modules" / ".bin" / "allure").exists(),
    reason="node or the npm package allure is not installed (python3 tools/setup_env.py installs both)",
)
def test_report_prints_the_experiment_page_last(record_dir, tmp_path, capsys):
    """What `make baseline` ends with: the Allure report, then the page drawn from the record the
    session left beside the results (reports/experiment/)."""
    reports = tmp_path / "reports"
    done = run_session(tmp_path, ONE_ROW_TEST, "--alluredir", str(reports / "allure-results"))
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.copytree(record_dir, reports / "experiment", ignore=shutil.ignore_patterns("index.html"))
    assert main(["report", "--results", str(reports / "allure-results"), "--out", str(reports / "allure-report")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == f"Allure report: {reports / 'allure-report' / 'index.html'}"
    assert lines[-1] == str(reports / "experiment" / "index.html")
    page = (reports / "experiment" / "index.html").read_text()
    assert "../allure-report/index.html" in page and "<script" not in page


def test_links_open_the_test_in_the_allure_report(record_dir, tmp_path):
    """A title the report names once links to that test (#/<id>); a title it names twice links to
    the front page, since either test could be meant."""
    record = load_record(record_dir)
    unique, shared = record.ab[1].test.title, record.rungs[0].test.title
    report = tmp_path / "reports" / "allure-report"
    report.mkdir(parents=True)
    by_id = {"a1": {"id": "a1", "name": unique}, "b1": {"id": "b1", "name": shared}, "b2": {"id": "b2", "name": shared}}
    (report / "test-results.json").write_text(json.dumps({"byId": by_id}))
    page = build_experiment_page(record_dir, tmp_path / "reports" / "experiment" / "index.html").read_text()
    assert "../allure-report/index.html#/a1" in page
    assert "#/b1" not in page and "#/b2" not in page


def test_a_further_candidates_answers_have_their_own_block():
    from harness.report.experiment_page import ab_section

    nodeid = "tests/ab/test_ab_gate.py::test_further_candidate_question[true-on-policy-drift-reduced]"
    record = record_with_ab(nodeid, key="true-on-policy:drift-reduced", passed=True, message="abs-diff 9.46e-3 -> 3.10e-3")
    html = ab_section(record, None)
    assert "Further candidate: true-on-policy" in html
    assert "drift-reduced" in html and "abs-diff 9.46e-3 -&gt; 3.10e-3" in html
    assert "<h3>" not in ab_section(new_record(argv=[]), None)


def test_the_candidates_counted_calls_stand_beside_the_answers():
    from harness.report.experiment_page import ab_section

    nodeid = "tests/ab/test_candidate_executed.py::test_candidate_executed_on_both_engines[pair]"
    evidence = {"expected": [{"side": "rollout", "pass": "sampler", "operator": "fused-linear-logprob", "calls": 83, "tokens": 2541}]}
    record = record_with_ab(nodeid, key="candidate-executed", passed=True, message="executed: counted in both engines", evidence=evidence)
    html = ab_section(record, None)
    assert "Candidate executed (operator calls counted in both engines)" in html
    assert "fused-linear-logprob" in html and "calls: 83" in html and "tokens: 2541" in html
    assert "Candidate executed" not in ab_section(new_record(argv=[]), None)


def record_with_ab(nodeid: str, *, key: str, passed: bool, message: str, evidence: dict | None = None):
    """A record holding one A/B answer whose test passed (the page's A/B section alone)."""
    record = new_record(argv=[])
    entry = AbAnswer(
        key=key,
        question=key,
        passed=passed,
        message=message,
        evidence=evidence or {},
        baseline_run="a",
        candidate_run="b",
        mode=None,
        test=entries.test_ref(nodeid, "t"),
    )
    add_entry(record, "ab", entry)
    record.outcomes[nodeid] = "passed"
    return record
