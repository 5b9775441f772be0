"""The re-scorer's prefill batches (harness.embedded.lever_score.prefill_groups): consecutive, within
the token budget, every sequence once, in order, so each batch is prefilled in one scheduler step."""

from __future__ import annotations

from harness.embedded.lever_score import prefill_groups


def test_groups_are_consecutive_within_the_budget_and_cover_every_sequence_once():
    lengths = [43, 40, 45, 41] * 32  # a 128-sequence rollout of ~5,500 tokens
    groups = prefill_groups(lengths, budget=2048)
    assert [i for group in groups for i in group] == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in group) <= 2048 for group in groups)
    assert len(groups) == 3


def test_a_sequence_longer_than_the_budget_is_prefilled_alone():
    assert prefill_groups([10, 5000, 10, 10], budget=2048) == [[0], [1], [2, 3]]
    assert prefill_groups([]) == []
