"""The embedded run id covers the code that ran: the trainer's import closure inside harness.

Each test edits a temporary copy of harness/, never the real tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.spec.code_version import ENTRY_POINTS, code_version, embedded_code_version, import_closure


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO_ROOT / "harness", root / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _closure(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in import_closure(root)}


def test_the_copy_has_the_real_trees_version(tree):
    assert code_version(tree) == embedded_code_version()


def test_the_closure_holds_the_entry_points_and_what_they_import(tree):
    closure = _closure(tree)
    for name in ENTRY_POINTS:
        assert name.replace(".", "/") + ".py" in closure
    # imported by name (from ... import), by string (the operator registry), and parent packages
    assert {"harness/layout/token_shift.py", "harness/operators/impl_reference.py", "harness/operators/__init__.py", "harness/__init__.py"} <= closure
    # judging code is not what ran: a changed check re-judges old runs, it does not re-run them
    assert not any(path.startswith("harness/judge/") for path in closure)


@pytest.mark.parametrize("module", ["harness/operators/impl_reference.py", "harness/layout/token_shift.py", "harness/embedded/train.py"])
def test_editing_an_imported_module_changes_the_version(tree, module):
    path = tree / module
    before_text = path.read_text()
    before = code_version(tree)
    try:
        path.write_text(before_text + "\n# an edit\n")
        assert code_version(tree) != before
    finally:
        path.write_text(before_text)
    assert code_version(tree) == before


def test_editing_a_module_the_trainer_does_not_import_keeps_the_version(tree):
    path = tree / "harness" / "judge" / "verdict.py"
    before_text = path.read_text()
    before = code_version(tree)
    try:
        path.write_text(before_text + "\n# an edit\n")
        assert code_version(tree) == before
    finally:
        path.write_text(before_text)


def test_a_new_import_brings_its_module_into_the_version(tmp_path):
    """Lazy imports inside functions, relative imports and modules named as strings all count."""
    package = tmp_path / "harness"
    (package / "embedded").mkdir(parents=True)
    (package / "extra").mkdir()
    for init in (package / "__init__.py", package / "embedded" / "__init__.py", package / "extra" / "__init__.py"):
        init.write_text("")
    (package / "embedded" / "train.py").write_text("def main():\n    from . import helper\n")
    (package / "embedded" / "helper.py").write_text("RUN = 'harness.extra.by_name'\n")
    (package / "extra" / "by_name.py").write_text("X = 1\n")
    (package / "extra" / "unused.py").write_text("X = 1\n")
    closure = {path.relative_to(tmp_path).as_posix() for path in import_closure(tmp_path, ("harness.embedded.train",), ())}
    assert closure == {
        "harness/__init__.py",
        "harness/embedded/__init__.py",
        "harness/embedded/train.py",
        "harness/embedded/helper.py",
        "harness/extra/__init__.py",
        "harness/extra/by_name.py",
    }
