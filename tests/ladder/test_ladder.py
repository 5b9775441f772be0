"""The mismatch knob ladder: each rung against its parent (generated from knobs/ladder/).

A rung passes when the delta it adds is isolated (a confidence interval against its parent), its
observed direction and evidence-decided drift class match what the rung file expects, and the
rung meets the absolute bounds its file declares. The Session decides all of it
(harness.experiment.session.Session.rung); this test only asks.
"""

import pytest

from fixtures.experiment import decide


@pytest.mark.ladder
def test_rung_against_parent(rung_case, main_job, request):
    decide(main_job, request, "rung", rung_case)
