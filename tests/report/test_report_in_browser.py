"""The whole record path, as a reviewer meets it: a pytest session writes Allure results, the
report is built with Allure 3, and Debian's Chromium opens it headless. The summary table and a
per-rung plot must be there; screenshots go to reports/ for a person to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from sessions import HERE, run_session

from harness import REPO_ROOT
from harness.report.plots import DPI, FIGSIZE
from harness.report.report import build_report
from harness.report.summary import COLUMNS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = REPO_ROOT / "reports"

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make test` installs Debian's chromium as root: setup_env.py --browser)"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (the report is built with Allure 3 on Node)"),
    pytest.mark.skipif(
        not (REPO_ROOT / "node_modules" / "playwright-core").is_dir(),
        reason="playwright-core is not installed: run `npm ci` (package.json devDependencies)",
    ),
]

# Two rungs of the ladder, each with its record, its plots and a summary row.
SESSION = """
import numpy as np
import pytest
from runbuilder import make_run, noisy, perf_series, resolved_spec
from harness.report.allure_attach import attach_plot, attach_run, attach_table, label_experiment
from harness.report.audit_plots import dlogp_histogram, worst_token_rows
from harness.report.plots import rung_figures
from harness.report.summary import summary_row_from_run

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    parent = make_run(root, "near-aligned-run", resolved_spec("p1", "near-aligned"), abs_diff=noisy(0.0135, 12, 1),
                      reward=noisy(0.40, 12, 2), perf=perf_series(12, 3))
    child = make_run(root, "fp8-rollout-run", resolved_spec("p1", "fp8-rollout"), abs_diff=noisy(0.031, 12, 4),
                     reward=noisy(0.38, 12, 5), perf=perf_series(12, 6))
    return {"near-aligned": (parent, None), "fp8-rollout": (child, parent)}

@pytest.mark.parametrize("rung", ["near-aligned", "fp8-rollout"])
def test_rung(runs, rung, record_summary_row, knobs):
    run, parent = runs[rung]
    label_experiment("p1", rung, "against parent", "colocate", "embedded", run.id, seed=1234)
    attach_run(run)
    for name, fig in rung_figures(run, parent, warmup=2).items():
        attach_plot(fig, name)
    dlogp = np.random.default_rng(0).standard_t(3, 2000) * 0.01
    attach_plot(dlogp_histogram(dlogp), "dlogp histogram")
    attach_table(worst_token_rows([{"dlogp": float(v), "position": i} for i, v in enumerate(dlogp[:50])]), "worst tokens")
    record_summary_row(summary_row_from_run(run, rung, parent=parent, knobs=knobs))
"""


def chromium_dump_dom(index: Path) -> str:
    """Plain headless Chromium with these flags: without
    --virtual-time-budget the page is still empty when the DOM is dumped."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--window-size=1400,1000",
                "--virtual-time-budget=10000",
                "--dump-dom",
                index.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def summary_cells(summary_md: Path) -> list[list[str]]:
    rows = [line for line in summary_md.read_text().splitlines() if line.startswith("| ")][1:]
    # Split on unescaped pipes; the cells between the outer ones (an empty Notes cell included).
    return [[cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in rows]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("browser")
    done = run_session(workdir, SESSION, "--alluredir", str(workdir / "reports" / "allure-results"))
    assert done.returncode == 0, done.stdout + done.stderr
    return build_report(workdir / "reports" / "allure-results", workdir / "reports" / "allure-report")


def test_report_loads_in_headless_chromium(report):
    dom = chromium_dump_dom(report)
    for text in ("VIME train-inference mismatch", "Global Attachments", "p1"):
        assert text in dom, f"{text!r} not in the rendered report ({len(dom)} characters of DOM)"


def test_summary_table_and_plot_are_shown(report, tmp_path):
    shots = tmp_path / "shots"
    shots.mkdir()
    done = subprocess.run(
        [
            "node",
            str(HERE / "browse_report.mjs"),
            str(report),
            str(shots),
            "test_rung[fp8-rollout]",
            "abs-diff per step (parent overlaid)",
            "p1",
            "fp8-rollout",
            "against parent",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and "error" not in found, found.get("error") or done.stderr[-2000:]

    assert found["summary"]["headers"] == list(COLUMNS)
    assert found["summary"]["rows"] == summary_cells(report.parent / "summary.md"), "the table in the browser must be the one in summary.md"
    assert found["summary"]["image"]["width"] > 0
    assert (found["plot"]["width"], found["plot"]["height"]) == (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))

    SCREENSHOTS.mkdir(exist_ok=True)
    for shot in found["screenshots"]:
        assert Path(shot).stat().st_size > 20_000, f"{shot} looks blank"
        shutil.copyfile(shot, SCREENSHOTS / Path(shot).name)
