"""The judge opens no file: every number and record it judges is gathered beforehand
(harness.experiment.evidence, the Session) and passed in. Checked on harness/judge's source: no
call that opens, reads, lists or tests a file, and no call of a reader that does; the check itself
is shown to catch each kind on a small module built to break it.
"""

from __future__ import annotations

import ast

import pytest

from harness import REPO_ROOT

JUDGE = REPO_ROOT / "harness" / "judge"
# Path and file-object methods that touch the file system, and the project's readers of run files.
FILE_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file", "is_dir", "glob", "rglob", "iterdir", "stat"}
FILE_FUNCTIONS = {
    "open",
    "load",
    "safe_load",
    "parse_log_file",
    "read_operator_calls",
    "read_decisions",
    "load_run",
    "read_json",
    "RunDir",
    "listdir",
}


def file_calls(source: str) -> list[str]:
    """Each call in `source` that touches a file: 'line N: name'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and name in FILE_METHODS | FILE_FUNCTIONS:
            found.append(f"line {node.lineno}: .{name}()")
        elif isinstance(func, ast.Name) and name in FILE_FUNCTIONS:
            found.append(f"line {node.lineno}: {name}()")
    return found


def test_no_module_of_the_judge_touches_a_file():
    found = {path.name: calls for path in sorted(JUDGE.glob("*.py")) if (calls := file_calls(path.read_text()))}
    assert found == {}, f"harness/judge opens files (gather the evidence in harness/experiment instead): {found}"


@pytest.mark.parametrize(
    "snippet",
    [
        "log = run.path / 'log.txt'\nif log.exists(): pass",
        "text = open(path).read()",
        "failures = parse_log_file(run.path / 'log.txt').failures",
        "calls, problem = read_operator_calls(run.path)",
        "data = json.load(handle)",
        "files = sorted(path.rglob('*'))",
    ],
)
def test_the_check_catches_a_file_read(snippet):
    assert file_calls(snippet), snippet
