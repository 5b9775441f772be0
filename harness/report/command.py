"""`python -m harness report`: build the HTML report and the experiment page; the last line printed
is the experiment page's index.html (or the Allure report's, when the session wrote no record).

    python -m harness report                          Allure report + reports/experiment/index.html
    python -m harness report --compare DIR_A DIR_B    the page for record A (candidate) against B (baseline)
    python -m harness results                         docs/results.md from the committed records
    python -m harness results --add reports/experiment/experiment.json   a finished job's record, committed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import REPO_ROOT

DEFAULT_RESULTS = REPO_ROOT / "reports" / "allure-results"
DEFAULT_OUT = REPO_ROOT / "reports" / "allure-report"
DEFAULT_COMPARE_OUT = REPO_ROOT / "reports" / "experiment-compare" / "index.html"


def build_experiment_page(record_dir: Path, out: Path, baseline_dir: Path | None = None, allure_report: Path | None = None) -> Path:
    """Raises RecordError (one line) when a record cannot be read. `allure_report`: the built
    report whose test ids the page links to (default: ../allure-report beside the page)."""
    from harness.report.experiment_page import allure_ids, write_page
    from harness.report.experiment_record import load_record

    record = load_record(record_dir)
    baseline = load_record(baseline_dir) if baseline_dir is not None else None
    return write_page(record, out, baseline, allure_ids(allure_report or Path(out).parent.parent / "allure-report"))


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.report.experiment_record import RecordError

    candidate, baseline = (Path(p) for p in args.compare)
    try:
        page = build_experiment_page(candidate, Path(args.page_out or DEFAULT_COMPARE_OUT), baseline)
    except RecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(page)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report.experiment_record import FILE_NAME, FOLDER, RecordError
    from harness.report.report import ReportError, build_report

    if args.compare:
        return cmd_compare(args)
    try:
        index = build_report(Path(args.results), Path(args.out), single_file=not args.folder)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = index.parent / "summary.md"
    if summary.exists():
        print(f"summary table: {summary}")
    else:
        print("summary table: none (no experiment test recorded a summary row in this session)")
    # The session wrote its record beside the results (fixtures/report.py: <summary dir>/experiment/).
    record_dir = Path(args.results).resolve().parent / FOLDER
    if not (record_dir / FILE_NAME).exists():
        print(f"experiment page: none ({record_dir / FILE_NAME} not written: no judged test ran in this session)")
        print(index)
        return 0
    print(f"Allure report: {index}")
    try:
        page = build_experiment_page(record_dir, Path(args.page_out) if args.page_out else record_dir / "index.html")
    except RecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(page)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="build the HTML report (Allure 3) and the experiment page from a session's results",
        description=(
            "Build the Allure 3 report from pytest's --alluredir results, copy summary.md beside it, build the experiment page "
            "(experiment/index.html beside the results, from experiment/experiment.json) and print its path last. "
            "With --compare CANDIDATE BASELINE, only the page for one record against another."
        ),
    )
    parser.add_argument("--results", default=str(DEFAULT_RESULTS), help=f"Allure results directory (default: {DEFAULT_RESULTS})")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"report folder, emptied first (default: {DEFAULT_OUT})")
    parser.add_argument("--folder", action="store_true", help="a multi-file report (serve it over HTTP) instead of one self-contained index.html")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("DIR_A", "DIR_B"),
        help="render the experiment page of the record in DIR_A (candidate) against DIR_B (baseline); each folder holds experiment.json",
    )
    parser.add_argument(
        "--page-out",
        default=None,
        help=f"where the experiment page goes (default: experiment/index.html beside the results; with --compare {DEFAULT_COMPARE_OUT})",
    )
    parser.set_defaults(func=cmd_report)
    register_results(subparsers)


def cmd_results(args: argparse.Namespace) -> int:
    from harness.report.results_page import ResultsRecordError, check_page, write_page
    from harness.report.results_records import add_record

    try:
        if args.add:
            added = add_record(
                Path(args.add), job=args.job, wall=args.wall, allure=Path(args.allure_results) if args.allure_results else None, note=args.note
            )
            print(f"record: {added}")
        if args.check:
            stale = check_page()
            if stale:
                print(f"error: {stale}", file=sys.stderr)
                return 1
            print("docs/results.md is what its records give")
            return 0
        print(write_page())
    except ResultsRecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def register_results(subparsers) -> None:
    parser = subparsers.add_parser(
        "results",
        help="write docs/results.md from the committed records (reports/records, reports/bench, reports/controls, knobs/design.yaml)",
        description=(
            "Generate docs/results.md, one figure or small table per question, each naming the committed record it comes "
            "from with that record's date, commit and machine. With --add, first condense a finished job's record into "
            "reports/records/ (commit it with the page)."
        ),
    )
    parser.add_argument(
        "--add",
        metavar="PATH",
        help="a finished job's experiment record (experiment.json or its folder) or a seed sweep's sweep.json, condensed into reports/records/",
    )
    parser.add_argument(
        "--job",
        default="main-job",
        help="which job made the experiment record: main-job (default), make-test or make-candidate (harness.report.results_records.JOB_FILES)",
    )
    parser.add_argument("--wall", help="the job's wall time as its caller measured it (17m37s, 1057): the tests' own span is read from Allure")
    parser.add_argument("--allure-results", help="the job's Allure results (default: allure-results beside the record's experiment/ folder)")
    parser.add_argument("--note", default="", help="the conditions of the measurement, in words (e.g. other jobs loaded the machine)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if docs/results.md differs from what the records give")
    parser.set_defaults(func=cmd_results)
