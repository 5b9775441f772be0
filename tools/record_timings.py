"""Rewrite the "Timings" table of docs/results.md: how long the main job and CI take, now.

The table is generated, never edited by hand: one row per job, replaced by the latest
measurement, each with its commit, date and machine. The wall time is measured by whoever ran
the job (it includes setup, which no test record sees); the test counts and the test phase's
duration come from the job's own record when one is given:

    # after `time make baseline` printed 14m8s:
    .venv/bin/python tools/record_timings.py --job baseline --wall 14m8s --allure-results reports/allure-results
    # after `time bash .ci/run` on a fresh clone printed 25m36s:
    .venv/bin/python tools/record_timings.py --job ci --wall 25m36s --allure-results reports/selftest/allure-results
    # or from a JUnit XML file (pytest --junitxml), or the figures by hand:
    .venv/bin/python tools/record_timings.py --job ci --wall 25m36s --junit junit.xml
    .venv/bin/python tools/record_timings.py --job ci --wall 25m36s --test-time 23m6s

Bad input is one `error:` line and exit code 2; the page is only written when the row is whole.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
BEGIN = "<!-- timings: rewritten by tools/record_timings.py, do not edit by hand -->"
END = "<!-- timings: end -->"
HEADER = ("job", "command", "wall time", "tests", "test phase", "commit", "measured", "machine")
# Row order and what each job runs (README: the two commands; .ci/run calls the test command).
JOBS = {
    "baseline": ("main job", "`make baseline`"),
    "ci": ("CI", "`bash .ci/run` (`make lint`, `make test`)"),
}
NOT_RECORDED = "not recorded"


class TimingError(Exception):
    """One line for the user: the option, the value and what was expected."""


@dataclass(frozen=True)
class JobTests:
    counts: dict[str, int]
    seconds: float | None

    def counts_text(self) -> str:
        order = ("passed", "failed", "broken", "skipped", "unknown")
        parts = [f"{self.counts[s]} {s}" for s in order if self.counts.get(s)]
        return ", ".join(parts) or "0 tests"


def parse_duration(text: str, option: str) -> float:
    """`14m8s`, `1h2m`, `848s`, `848` (seconds) -> seconds."""
    value = text.strip().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", value)
    if not value or not match or not any(match.groups()):
        raise TimingError(f"{option} {text!r}: expected a duration such as 14m8s, 1h2m or 848 (seconds)")
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def format_duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min {secs} s"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def from_allure(results: Path) -> JobTests:
    """Test counts by status and the span from the first test's start to the last one's stop."""
    files = sorted(results.glob("*-result.json")) if results.is_dir() else []
    if not files:
        raise TimingError(f"--allure-results {results}: no *-result.json files, expected the folder a `pytest --alluredir` run wrote")
    counts: dict[str, int] = {}
    starts, stops = [], []
    for path in files:
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TimingError(f"--allure-results {path}: not readable JSON ({err})") from None
        status = str(result.get("status") or "unknown")
        counts[status] = counts.get(status, 0) + 1
        if isinstance(result.get("start"), int | float) and isinstance(result.get("stop"), int | float):
            starts.append(result["start"])
            stops.append(result["stop"])
    seconds = (max(stops) - min(starts)) / 1000 if starts else None
    return JobTests(counts, seconds)


def from_junit(path: Path) -> JobTests:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise TimingError(f"--junit {path}: not a readable JUnit XML file ({err})") from None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise TimingError(f"--junit {path}: no <testsuite> element, expected the file `pytest --junitxml` writes")
    total = failed = skipped = 0
    seconds = 0.0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
        seconds += float(suite.get("time", 0))
    return JobTests({"passed": total - failed - skipped, "failed": failed, "skipped": skipped}, seconds)


def machine_description() -> str:
    """Cores, CPU model and its vector ISA (AVX-512 or AVX2 only: the two x86 kinds time differently)."""
    sys.path.insert(0, str(ROOT))
    from harness.records.environment import cpu_and_memory, isa_text

    cpu = cpu_and_memory()
    return f"{cpu['cores']} cores, {cpu['model'] or 'unknown CPU'}, {isa_text(cpu)}"


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise TimingError("--commit not given and `git rev-parse --short HEAD` failed: give the commit the job ran")
    return done.stdout.strip()


def table_rows(text: str, doc: Path) -> dict[str, list[str]]:
    """The rows between the markers, by job name (the first cell)."""
    if BEGIN not in text or END not in text:
        raise TimingError(f"{doc}: no timings table (expected the lines {BEGIN!r} and {END!r})")
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    rows = {}
    for line in block.strip().splitlines()[2:]:  # skip the header and its rule
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == len(HEADER):
            rows[cells[0]] = cells
    return rows


def render_table(rows: dict[str, list[str]]) -> str:
    order = [name for name, _ in JOBS.values()]
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for name in sorted(rows, key=lambda n: order.index(n) if n in order else len(order)):
        lines.append("| " + " | ".join(rows[name]) + " |")
    return "\n".join(lines)


def rewrite(doc: Path, row: list[str]) -> None:
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError as err:
        raise TimingError(f"--doc {doc}: not readable ({err.strerror})") from None
    rows = table_rows(text, doc)
    rows[row[0]] = row
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + render_table(rows) + "\n" + text[stop:], encoding="utf-8")


def build_row(args: argparse.Namespace) -> list[str]:
    wall = parse_duration(args.wall, "--wall")
    record = None
    if args.allure_results is not None:
        record = from_allure(args.allure_results)
    elif args.junit is not None:
        record = from_junit(args.junit)
    test_seconds = parse_duration(args.test_time, "--test-time") if args.test_time else (record.seconds if record else None)
    name, command = JOBS[args.job]
    date = args.date or datetime.now(UTC).date().isoformat()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise TimingError(f"--date {date!r}: expected YYYY-MM-DD")
    return [
        name,
        command,
        format_duration(wall),
        record.counts_text() if record else NOT_RECORDED,
        format_duration(test_seconds) if test_seconds is not None else NOT_RECORDED,
        args.commit or head_commit(),
        date,
        args.machine or machine_description(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, choices=sorted(JOBS), help="which row: the main job or CI")
    parser.add_argument("--wall", required=True, help="the job's wall time as measured (14m8s, 848)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--allure-results", type=Path, help="the job's Allure results folder: test counts and the test phase")
    source.add_argument("--junit", type=Path, help="a JUnit XML file (pytest --junitxml): test counts and time")
    parser.add_argument("--test-time", help="the test phase's duration, if no record gives it (23m6s)")
    parser.add_argument("--commit", help="the commit the job ran (default: HEAD)")
    parser.add_argument("--date", help="the day it was measured, YYYY-MM-DD (default: today, UTC)")
    parser.add_argument("--machine", help="where it ran (default: this machine's cores and CPU model)")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page holding the table (default docs/results.md)")
    args = parser.parse_args(argv)
    try:
        row = build_row(args)
        rewrite(args.doc, row)
    except TimingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(" | ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
