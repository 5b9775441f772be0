"""Fixtures for the records tests: the real-format VIME logs in tests/data/vime_logs."""

from pathlib import Path

import pytest

VIME_LOGS = Path(__file__).resolve().parent.parent / "data" / "vime_logs"


@pytest.fixture
def vime_logs() -> Path:
    return VIME_LOGS
