"""Run a small pytest session in a subprocess, as a user would, with the record plugin loaded.

A subprocess (not pytester's in-process run) because allure-pytest keeps its listener in a
process-wide plugin manager: an in-process inner session would write into the outer session's
results when the outer one runs with --alluredir.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness import REPO_ROOT

HERE = Path(__file__).resolve().parent


def run_session(workdir: Path, test_source: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Write test_source as workdir/test_inner.py and run pytest on it; rootdir is workdir, so no
    conftest of this repository applies and nothing is written under reports/."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "test_inner.py").write_text(test_source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "fixtures.options",
        "-p",
        "fixtures.report",
        "-p",
        "fixtures.knobs",
        "--rootdir",
        str(workdir),
        "--summary-dir",
        str(workdir / "reports"),
        str(workdir / "test_inner.py"),
        *args,
    ]
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
