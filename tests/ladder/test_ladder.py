"""The mismatch knob ladder: each rung against its parent (generated from knobs/ladder/)."""

import pytest


@pytest.mark.ladder
def test_rung_against_parent(rung_case, get_run):
    run = get_run(rung_case.stage, rung_case.rung.id, rung_case.mode)
