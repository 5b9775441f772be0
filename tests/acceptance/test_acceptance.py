"""The seed's acceptance criteria, one test each (generated from knobs/acceptance.yaml)."""

import pytest


@pytest.mark.acceptance
def test_criterion(criterion, knobs, pytestconfig, get_run):
    judged = knobs.acceptance.judges
    run = get_run(judged["stage"], judged["rung"], pytestconfig.getoption("--mode"))
