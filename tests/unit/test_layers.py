"""The layering rules of docs/architecture.md hold: import-linter's contracts in pyproject.toml
([tool.importlinter]: the layers, and no import cycle between sibling modules at any depth).

The checker itself is tested too: a copy of harness/ with one upward import and one cycle added
must break both contracts (the real tree is never edited).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from harness import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_harness_keeps_its_layers_and_has_no_import_cycle():
    result = _lint(REPO_ROOT)
    assert result.returncode == 0, f"import-linter (pyproject.toml [tool.importlinter]):\n{result.stdout}{result.stderr}"


def test_an_upward_import_and_a_cycle_break_the_contracts(tmp_path):
    shutil.copytree(REPO_ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    rules = tmp_path / "harness" / "spec" / "rules.py"
    rules.write_text(rules.read_text() + "\nfrom harness.embedded import factory  # noqa: E402\n")  # spec -> a backend above it
    errors = tmp_path / "harness" / "spec" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom harness.spec import rules  # noqa: E402\n")  # errors <-> rules
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "harness.spec.rules -> harness.embedded.factory" in result.stdout
    assert "No cycles are allowed in harness.spec" in result.stdout


def test_a_judge_that_launches_or_imports_the_trainer_breaks_the_pure_judge_contract(tmp_path):
    shutil.copytree(REPO_ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    paired = tmp_path / "harness" / "judge" / "paired.py"
    paired.write_text(paired.read_text() + "\nfrom harness.launch import warm  # noqa: E402\n")  # a scorer forked from the judge
    ab = tmp_path / "harness" / "judge" / "ab.py"
    ab.write_text(ab.read_text() + "\nfrom harness.embedded import factory  # noqa: E402\n")  # the trainer's data factory
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "the judge takes numbers and evidence" in result.stdout and "BROKEN" in result.stdout
    assert "harness.judge.paired -> harness.launch.warm" in result.stdout
    assert "harness.judge.ab -> harness.embedded.factory" in result.stdout
