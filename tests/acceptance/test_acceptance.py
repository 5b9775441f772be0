"""The seed's acceptance criteria, one test each (generated from knobs/acceptance.yaml).

Every criterion judges the recommended baseline (acceptance.yaml: judges) at its stage, in the
session's --mode, on the session's --backend; the Session decides it
(harness.experiment.session.Session.criterion).
"""

import pytest

from fixtures.experiment import decide


@pytest.mark.acceptance
def test_criterion(criterion, main_job, request):
    decide(main_job, request, "criterion", criterion)
