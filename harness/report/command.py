"""`python -m harness report`: build the HTML report; the last line printed is its index.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import REPO_ROOT

DEFAULT_RESULTS = REPO_ROOT / "reports" / "allure-results"
DEFAULT_OUT = REPO_ROOT / "reports" / "allure-report"


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report.report import ReportError, build_report

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
    print(index)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="build the HTML report (Allure 3) from the Allure results",
        description="Build the Allure 3 report from pytest's --alluredir results, copy summary.md beside it, and print the path of its index.html.",
    )
    parser.add_argument("--results", default=str(DEFAULT_RESULTS), help=f"Allure results directory (default: {DEFAULT_RESULTS})")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"report folder, emptied first (default: {DEFAULT_OUT})")
    parser.add_argument("--folder", action="store_true", help="a multi-file report (serve it over HTTP) instead of one self-contained index.html")
    parser.set_defaults(func=cmd_report)
