"""docs/results.md is generated from committed records (harness.report.results_page): the committed
page is exactly what its records give, it stays under its line limit, every figure names its record
with that record's date, commit and machine, and a bad record is one line naming the file and key.
`python -m harness results --add` condenses a job's real record (Allure results written by a real
pytest session under pytester) into the committed form the page reads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from harness import REPO_ROOT
from harness.cli import main as cli_main
from harness.report import experiment_record as entries
from harness.report.results_page import BENCH_PAGE, MAX_LINES, PAGE, build_bench_page, build_page, check_page
from harness.report.results_records import JobRecord, ResultsRecordError, SweepRecord, add_record

pytest_plugins = ["pytester"]

PAGE_LIMIT = 300  # the page is a summary of records, not a diary: one figure or small table per question
RECORD_LINE = re.compile(r"^Records?: (?P<paths>(`[^`]+`(, )?)+); made (?P<date>[^;]+); commit (?P<commit>[^;]+); machine (?P<machine>.+)$")


def _root_copy(tmp_path):
    """The page's inputs (records, bench, controls, knobs) in a folder of their own, to corrupt or extend."""
    for part in ("reports/records", "reports/bench", "reports/controls", "knobs"):
        shutil.copytree(REPO_ROOT / part, tmp_path / part)
    (tmp_path / "docs").mkdir()
    return tmp_path


def test_the_committed_page_is_what_its_records_give():
    committed = (REPO_ROOT / PAGE).read_text(encoding="utf-8")
    assert committed == build_page(REPO_ROOT), f"{PAGE} differs from its records: run `python -m harness results` and commit the page"
    assert check_page(REPO_ROOT) is None


def test_the_page_stays_under_its_line_limit(monkeypatch):
    assert MAX_LINES == PAGE_LIMIT
    assert len((REPO_ROOT / PAGE).read_text(encoding="utf-8").splitlines()) <= PAGE_LIMIT
    monkeypatch.setattr("harness.report.results_page.MAX_LINES", 50)
    with pytest.raises(ResultsRecordError, match=r"docs/results.md: the records give \d+ lines, over the page's 50"):
        build_page(REPO_ROOT)


def _git_ignored(path: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO_ROOT, capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("page", [PAGE, BENCH_PAGE])
def test_every_figure_names_its_committed_record_with_date_commit_and_machine(page):
    sections, current = [], None
    for line in (REPO_ROOT / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = {"title": line, "records": [], "tables": 0, "no_record": False}
            sections.append(current)
        elif current is not None:
            match = RECORD_LINE.match(line)
            if match:
                current["records"] += re.findall(r"`([^`]+)`", match["paths"])
                assert all(match[part].strip() for part in ("date", "commit", "machine")), line
            current["no_record"] |= line.startswith("No committed record")
            # A section whose figures are the other generated page's (which this test reads too).
            current["no_record"] |= f"]({BENCH_PAGE.name})" in line
            if line.startswith("|---"):
                # A table belongs to the record lines above it in its section.
                assert current["records"], f"{current['title']}: a table before any `Record:` line"
                current["tables"] += 1
    assert len(sections) >= (6 if page == PAGE else 2)
    for section in sections:
        assert section["records"] or section["no_record"], f"{section['title']}: names no record and does not say it has none"
        for path in section["records"]:
            assert (REPO_ROOT / path).is_file(), f"{section['title']}: names {path}, which does not exist"
            assert not _git_ignored(path), f"{section['title']}: names {path}, which git ignores (not a committed record)"


@pytest.mark.parametrize(
    ("path", "edit", "message"),
    [
        (
            "reports/records/main-job.json",
            lambda d: d["rungs"][2].update(mean="high"),
            "reports/records/main-job.json: key 'rungs[2].mean': expected a valid number",
        ),
        ("reports/records/main-job.json", lambda d: d["provenance"].pop("made"), "reports/records/main-job.json: key 'provenance.made': missing"),
        ("reports/records/main-job.json", lambda d: d.update(answerz=[]), "reports/records/main-job.json: key 'answerz': no such key"),
        ("reports/bench/h200-floor.json", lambda d: d.pop("hardware"), "reports/bench/h200-floor.json: key 'hardware': missing"),
    ],
)
def test_a_bad_record_is_one_error_naming_the_file_and_the_key(tmp_path, path, edit, message):
    root = _root_copy(tmp_path)
    data = json.loads((root / path).read_text())
    edit(data)
    (root / path).write_text(json.dumps(data))
    with pytest.raises(ResultsRecordError) as caught:
        (build_bench_page if path.startswith("reports/bench/") else build_page)(root)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_bad_control_run_and_a_bad_design_name_their_key(tmp_path):
    root = _root_copy(tmp_path)
    controls = root / "reports/controls/control_sizes.json"
    runs = json.loads(controls.read_text())
    first = next(iter(runs))
    del runs[first]["rung"]
    controls.write_text(json.dumps(runs))
    with pytest.raises(ResultsRecordError, match=rf"^reports/controls/control_sizes.json: key '{first}.rung': missing"):
        build_page(root)
    shutil.copy(REPO_ROOT / "reports/controls/control_sizes.json", controls)
    design = root / "knobs/design.yaml"
    design.write_text(
        design.read_text().replace("    ladder/fp8-plus-filters:\n      answer: up", "    ladder/fp8-plus-filters:\n      answr: up", 1)
    )
    with pytest.raises(ResultsRecordError, match=r"^knobs/design.yaml: key 'measured.questions.ladder/fp8-plus-filters.answer': missing"):
        build_page(root)


def _experiment_record(folder):
    """A job's experiment record as a session writes it: one rung, one expected answer, its environment."""
    record = entries.new_record(argv=["pytest", "-m", "p1"], options={"mode": "colocate", "backend": "embedded"})
    test = entries.test_ref("tests/ladder/test_ladder.py::test_rung_against_parent[p1-near-aligned]", "near-aligned")
    means = {"near-aligned": {"run-a": {"seed": 2026, "mean": 0.0015}, "run-b": {"seed": 2027, "mean": 0.0013}}}
    rung = dict(stage="p1", rung="near-aligned", title="t", parent="fp32-floor", mode="colocate", run_id="run-a", mean=0.0014, ci=None)
    rung.update(parent_mean=1.6e-7, delta=0.0014, delta_ci=[0.0012, 0.0016], confidence=0.99, decision=None, decided_class="expected-numerical")
    rung.update(expected_class=["expected-numerical"], observed_direction="up", expected_direction="up", replicates=2, replicate_means=means)
    entries.add_entry(record, "rungs", {**rung, "margin": {"se_units": 12.5, "sample": {"seeds_per_side": [2, 2]}}, "test": test})
    answer = dict(key="ladder/p1/near-aligned", kind="ladder", expected="up", observed="up", note="")
    entries.add_entry(record, "answers", {**answer, "margin": {"se_units": float("nan")}, "test": test})
    env = dict(
        label="A/B baseline", run_id="run-a", run_dir="/x", stage="p1", rung="near-aligned", mode="colocate", backend="embedded", spec_hash="h"
    )
    hardware = {"cpu": {"model": "AMD EPYC", "cores": 2, "isa": "AVX-512"}, "gpus": {"count": 0}}
    entries.add_entry(
        record, "environment", {**env, "harness": {"commit": "0123456789abcdef", "dirty": False}, "hardware": hardware, "recorded": True}
    )
    record.outcomes[test.nodeid] = "passed"
    return entries.write_record(record, folder)


SUITE = """
import pytest

def test_one():
    pass

def test_two_fails_on_purpose():  # the counts must show a failure: this suite has one of each outcome
    pytest.fail("the pytester suite's failed outcome, on purpose")

@pytest.mark.skip(reason="not here")
def test_three():
    pass
"""


def test_add_condenses_a_jobs_record_with_its_tests_and_the_page_reads_it(pytester, tmp_path):
    pytester.makepyfile(SUITE)
    job = tmp_path / "job"
    pytester.runpytest_subprocess(f"--alluredir={job / 'allure-results'}", "-p", "allure_pytest")
    source = _experiment_record(job / "experiment")
    root = _root_copy(tmp_path / "root")
    written = add_record(source, root / "reports/records", job="make-test", wall="20m5s", note="nothing else ran")
    record = JobRecord.model_validate(json.loads(written.read_text()))
    assert written.name == "make-test.json" and record.kind == "make-test"
    assert record.tests.counts == {"failed": 1, "passed": 1, "skipped": 1} and record.tests.wall_seconds == 1205
    assert record.tests.test_seconds is not None and record.tests.test_seconds >= 0
    assert record.provenance.commits == ["0123456"] and record.provenance.machine.text() == "2 cores, AMD EPYC, AVX-512, no GPU"
    assert record.rungs[0].seeds["near-aligned"][1].mean == 0.0013 and record.rungs[0].outcome == "passed"
    assert record.answers[0].margin_se is None  # a NaN margin is "not measured", never a number
    page = build_page(root)
    assert "| `make test` | 1 passed, 1 failed, 1 skipped | " in page
    assert "| 20 min 5 s | `reports/records/make-test.json` (nothing else ran) |" in page


def test_make_candidates_record_has_a_section_of_its_own_and_an_unknown_job_is_refused(tmp_path):
    """The candidate's A/B does not fit the main job: make candidate's record is condensed beside it and
    the page shows its answers under its own target's name."""
    source = _experiment_record(tmp_path / "candidate" / "experiment")
    data = json.loads(source.read_text())
    answer = dict(key="candidate/negative-control/drift", kind="candidate", expected="increased", observed="increased", note="abs-diff +55%")
    data["answers"].append({**answer, "margin": {"se_units": 11.6}, "test": data["answers"][0]["test"]})
    data["preregistration"] = {"sha256": "c861da2c" + "0" * 56}
    source.write_text(json.dumps(data))
    root = _root_copy(tmp_path / "root")
    (root / "reports/records/make-candidate.json").unlink(missing_ok=True)
    assert "No committed record (`reports/records/make-candidate.json`): run `make candidate`" in build_page(root)
    written = add_record(source, root / "reports/records", job="make-candidate", wall="5m44s")
    condensed = JobRecord.model_validate(json.loads(written.read_text()))
    assert written.name == "make-candidate.json" and condensed.kind == "make-candidate"
    assert condensed.expectations_sha256 == "c861da2c" + "0" * 56  # the hash the job judged against, kept
    page = build_page(root)
    section = page.split("## The candidate operator (`make candidate`)")[1].split("\n## ")[0]
    assert "Pre-registration sha256 c861da2c." in section
    assert "| candidate/negative-control/drift | increased | increased | +11.6 |" in section
    assert "| `make candidate` | 1 passed (checks) |" in page
    with pytest.raises(ResultsRecordError, match=r"--job 'make-bench': expected one of main-job, make-test, make-candidate"):
        add_record(source, root / "reports/records", job="make-bench")


def test_a_record_from_another_checkout_is_named_as_that_checkout_names_it(tmp_path):
    # a fresh clone elsewhere (/tmp/clone) ran the job: the committed record names no machine's path
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    source = _experiment_record(clone / "reports" / "experiment")
    written = add_record(source.parent, tmp_path / "records", wall="9m5s")
    assert JobRecord.model_validate(json.loads(written.read_text())).source == "reports/experiment"


def test_a_record_with_no_allure_results_beside_it_counts_its_own_checks(tmp_path):
    # `python -m harness baseline` writes the record without Allure results: its checks are counted.
    source = _experiment_record(tmp_path / "baseline" / "experiment")
    written = add_record(source, tmp_path / "records", wall="9m5s")
    tests = JobRecord.model_validate(json.loads(written.read_text())).tests
    assert tests.counts == {"passed": 1} and tests.counted_from == "the record's checks"
    assert tests.test_seconds is None and tests.wall_seconds == 545 and tests.counts_text() == "1 passed (checks)"


def test_add_takes_a_seed_sweep_and_refuses_a_bad_experiment_record(tmp_path):
    sweep = tmp_path / "sweep.json"
    rows = [{"key": "ab/drift-reduced", "expected": "no (flat)", "held": 5, "seeds": 5, "min_margin": 10.2, "missed": []}]
    sweep.write_text(
        json.dumps({"created": "2026-12-06T10:00:00+00:00", "offsets": [100, 200], "commits": ["abc1234"], "machines": ["m"], "rows": rows})
    )
    written = add_record(sweep, tmp_path / "records")
    assert SweepRecord.model_validate(json.loads(written.read_text())).rows[0].held == 5
    bad = tmp_path / "bad" / "experiment.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"schema": 1, "created": "x", "session": {"argv": []}, "rungs": "none"}))
    with pytest.raises(ResultsRecordError, match=r"experiment.json: key 'rungs': expected a valid list"):
        add_record(bad, tmp_path / "records")


def test_the_command_reports_a_bad_input_in_one_line(tmp_path, capsys):
    assert cli_main(["results", "--add", str(tmp_path / "nothing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nothing.json" in err[0]
