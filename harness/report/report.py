"""The HTML report: Allure 3's "awesome" report built from reports/allure-results.

    build_report(results, out) -> out/index.html

Allure 3 is the npm package `allure`, pinned in package.json and installed by tools/setup_env.py
(`npm ci`) into node_modules; it runs on Node >= 20.19 and needs no Java. The report is one
self-contained index.html (--single-file: attachments inside, opens from file:// without a
server; single_file_fix.py mends a start-up race and drops the analytics tag), grouped as the
experiment is (stage > rung or criterion > check). summary.md and summary.csv are copied beside
it. Generating into a folder that already holds a report leaves the old index.html in place, so
the output folder is emptied first - but only when it is empty or holds a report this command
made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from harness import REPO_ROOT
from harness.report.single_file_fix import fix_single_file_report

MIN_NODE = (20, 19)
REPORT_NAME = "VIME train-inference mismatch"
GROUP_BY = "epic,feature,story"
MARKER = ".made-by-harness-report"
TIMEOUT_S = 600


class ReportError(Exception):
    """An expected failure, said in one line (what is missing and how to get it)."""


def allure_binary(repo_root: Path = REPO_ROOT) -> Path:
    node = shutil.which("node")
    if node is None:
        raise ReportError(
            "node not found on PATH: the report needs Node.js >= 20.19 (python3 tools/setup_env.py installs it, or apt-get install nodejs)"
        )
    done = subprocess.run([node, "--version"], capture_output=True, text=True)
    match = re.match(r"v(\d+)\.(\d+)", done.stdout.strip())
    if match and (int(match.group(1)), int(match.group(2))) < MIN_NODE:
        raise ReportError(f"node {done.stdout.strip()} is too old: Allure 3 needs Node >= {MIN_NODE[0]}.{MIN_NODE[1]}")
    binary = repo_root / "node_modules" / ".bin" / "allure"
    if not binary.exists():
        raise ReportError(
            f"Allure 3 is not installed in {repo_root / 'node_modules'}: run `npm ci` in {repo_root} "
            f"(python3 tools/setup_env.py does; package.json pins the npm package `allure`)"
        )
    return binary


def check_results(results: Path) -> int:
    """The number of readable test results in `results`; a folder with none is an error (an empty
    report would read as "nothing failed")."""
    if results.exists() and not results.is_dir():
        raise ReportError(f"{results}: is a file, expected the Allure results directory pytest's --alluredir wrote")
    if not results.is_dir():
        raise ReportError(f"{results}: no such results directory; run pytest with --alluredir={results} first (make baseline does)")
    files = sorted(results.glob("*-result.json"))
    if not files:
        raise ReportError(f"{results}: holds no *-result.json; run pytest with --alluredir={results} first (make baseline does)")
    unreadable = [(file, why) for file in files if (why := _unreadable_result(file))]
    if len(unreadable) == len(files):
        file, why = unreadable[0]
        raise ReportError(
            f"{results}: none of its {len(files)} *-result.json files is a readable Allure result "
            f"({file.name}: {why}); rerun pytest with --alluredir={results}"
        )
    return len(files) - len(unreadable)


def _unreadable_result(file: Path) -> str | None:
    """Why `file` is not an Allure test result (a JSON object with a name and a status), or None."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"not JSON ({type(err).__name__})"
    if not isinstance(data, dict) or "name" not in data or "status" not in data:
        return "a JSON value without the result's name and status"
    return None


def prepare_output(out: Path) -> None:
    """Empty `out` if it is ours (marker file) or empty; refuse to delete anything else."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out}: exists and is not a directory; pass another --out")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise ReportError(f"{out}: not empty and not made by `python -m harness report`; pass an empty or new --out (nothing was deleted)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("this folder is rebuilt (emptied) by `python -m harness report`\n")


def build_report(results: Path, out: Path, *, summary_dir: Path | None = None, name: str = REPORT_NAME, single_file: bool = True) -> Path:
    """Build the report; returns the path of its index.html. summary.md/.csv from `summary_dir`
    (default: the results directory's parent, i.e. reports/) are copied beside it."""
    from harness.report.envprops import write_environment_properties

    results, out = results.resolve(), out.resolve()
    check_results(results)
    binary = allure_binary()
    write_environment_properties(results, overwrite=False)  # the pytest session's one wins
    prepare_output(out)
    command = [str(binary), "awesome", str(results), "-o", str(out), "--report-name", name, "--group-by", GROUP_BY]
    if single_file:
        command.append("--single-file")
    env = {**os.environ, "ALLURE_NO_ANALYTICS": "true", "NO_COLOR": "1"}
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise ReportError(f"allure awesome did not finish in {TIMEOUT_S} s ({' '.join(command)})") from None
    index = out / "index.html"
    if done.returncode != 0 or not index.exists():
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise ReportError(f"allure awesome exited {done.returncode} without {index}: {tail or 'no output'}")
    fix_single_file_report(index)
    summary_dir = summary_dir or results.parent
    for name_ in ("summary.md", "summary.csv"):
        if (summary_dir / name_).exists():
            shutil.copyfile(summary_dir / name_, out / name_)
    return index
