"""Backends are one module each (harness/spec/backends/): the rest of the code asks a backend its
traits and never compares its name to a string. Held two ways: a scan of the code for such
comparisons, and a copy of the tree where one new module is a backend the command line renders for."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys

import pytest

from harness import REPO_ROOT
from harness.spec import SpecError, backends

NAMES = set(backends.names())


def name_comparisons(source: str) -> list[int]:
    """Lines comparing something to a backend's name (==, !=, in, not in a literal holding one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            literals = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            if any(isinstance(x, ast.Constant) and x.value in NAMES for x in literals):
                found.append(node.lineno)
                break
    return found


def test_no_code_outside_the_backends_compares_a_backend_name():
    folders = [REPO_ROOT / "harness", REPO_ROOT / "fixtures"]
    skip = REPO_ROOT / "harness" / "spec" / "backends"
    found = {
        str(path.relative_to(REPO_ROOT)): lines
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        if skip not in path.parents and (lines := name_comparisons(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"ask the backend (harness.spec.backends.backend(name).<trait>) instead: {found}"


def test_the_scan_sees_each_spelling():
    assert name_comparisons("a = backend == 'vime'\nb = x.backend != 'embedded'\nc = name in ('vime', 'records')\n") == [1, 2, 3]
    assert name_comparisons("d = backend == other\n") == []


def test_an_unknown_backend_is_one_line_naming_the_choices():
    with pytest.raises(SpecError) as err:
        backends.backend("slurm")
    assert err.value.problems == [f"--backend: expected one of {', '.join(backends.names())}, got 'slurm'"]


def test_records_launches_nothing():
    with pytest.raises(SpecError, match="does not launch runs"):
        backends.backend("records").trainer_command(None)


def test_a_new_backend_is_one_module(tmp_path):
    """A copy of the tree with one module added: --backend takes it, and its argv renders."""
    for part in ("harness", "knobs"):
        shutil.copytree(REPO_ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "harness" / "spec" / "backends" / "dryrun.py").write_text(
        "from harness.spec.backends.base import Backend\n"
        "BACKEND = Backend(name='dryrun', knob_section='vime', replicate_section='cluster', on_cluster=True, launches=False,\n"
        "                  runs_of='vime', trainer_in_repo=False, long_runs=False)\n"
    )
    rendered = subprocess.run(
        [sys.executable, "-m", "harness", "argv", "--stage", "p1", "--rung", "near-aligned", "--backend", "dryrun", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "--rollout-top-p" in rendered.stdout or "--hf-checkpoint" in rendered.stdout, rendered.stdout[:500]
