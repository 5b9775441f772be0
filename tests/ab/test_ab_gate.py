"""The P3 A/B gate: the candidate rung against its baseline, same stage and workload (knobs/ab.yaml:
pair), and each further candidate of knobs/ab.yaml `candidates` against the same baseline runs.
The Session decides each check (harness.experiment.session: ab_contract, ab_question,
mode_consistency); these tests only ask."""

import pytest

from fixtures.experiment import decide
from harness.judge import ab

pytestmark = [pytest.mark.ab, pytest.mark.p3]


def test_same_workload_contract(main_job, request):
    decide(main_job, request, "ab_contract", None)


@pytest.mark.parametrize("question", sorted(ab.QUESTIONS))
def test_question(question, main_job, request):
    decide(main_job, request, "ab_question", question, None)


def test_further_candidate_same_workload_contract(further_candidate, main_job, request):
    decide(main_job, request, "ab_contract", further_candidate)


@pytest.mark.parametrize("question", sorted(ab.QUESTIONS))
def test_further_candidate_question(further_candidate, question, main_job, request):
    decide(main_job, request, "ab_question", question, further_candidate)


def test_consistent_between_colocate_and_non_colocate(main_job, request):
    decide(main_job, request, "mode_consistency")
