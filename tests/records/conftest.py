"""Fixtures for the records tests: the real-format VIME logs in tests/data/vime_logs."""

from pathlib import Path

import pytest

VIME_LOGS = Path(__file__).resolve().parent.parent / "data" / "vime_logs"


@pytest.fixture
def vime_logs() -> Path:
    return VIME_LOGS


@pytest.fixture
def harness_cli(capsys):
    """The real `python -m harness` command line, run in this process (a subprocess per case costs a
    second of imports): (exit code, stdout, stderr)."""
    from harness.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
