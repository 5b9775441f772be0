"""Ready for Blackwell operator work? The seed's "Additional Acceptance Criteria", one test each
(generated from knobs/readiness.yaml); the Session decides each
(harness.experiment.session.Session.readiness, harness.judge.readiness) and the page shows them."""

import pytest

from fixtures.experiment import decide


@pytest.mark.acceptance
def test_readiness(readiness_criterion, main_job, request):
    decide(main_job, request, "readiness", readiness_criterion)
