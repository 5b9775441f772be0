"""Where the drift lives: each budget rung's drift budget by intervention (knobs/levers.yaml).

For each rung of budget.rungs, its runs are re-scored on their own sampled tokens under each lever
setting, the drift is shared out and localised, and the answer is held to the one the design seeds
pre-registered. The Session decides all of it (harness.experiment.session.Session.budget); this
test only asks.
"""

import pytest

from fixtures.experiment import decide
from harness import DEFAULT_KNOBS_DIR
from harness.spec import load_knobs

_LEVERS = load_knobs(DEFAULT_KNOBS_DIR).levers
BUDGET_RUNGS = _LEVERS.budget.rungs if _LEVERS else []


@pytest.mark.p1
@pytest.mark.attribution
@pytest.mark.parametrize("rung_id", BUDGET_RUNGS)
def test_drift_budget(rung_id, main_job, request):
    decide(main_job, request, "budget", rung_id)
