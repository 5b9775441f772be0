"""The candidate operator at the boundary that carries the drift (knobs/candidate.yaml), A/B'd under fixed
semantics: each pair through the same gate as the main job's A/B, the negative control beside them, and
the seed's A/B question 4 from the bf16 and fp8 pairs. Selected by `make candidate` (marker candidate):
these pairs do not fit the main job's time. The Session decides each
(harness.experiment.session.Session.candidate_pair, candidate_mixed_paths)."""

import pytest

from fixtures.experiment import decide

pytestmark = [pytest.mark.candidate, pytest.mark.p3]


def test_candidate_pair(candidate_pair, main_job, request):
    decide(main_job, request, "candidate_pair", candidate_pair)


def test_mixed_bf16_fp8_paths(main_job, request, knobs):
    if knobs.candidate is None:
        pytest.skip("knobs/ has no candidate.yaml")
    decide(main_job, request, "candidate_mixed_paths")
