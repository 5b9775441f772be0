"""The embedded trainer never pads rollout log-probs to the response (harness/embedded/loop.py):
a zero log-prob is a real value and would pass as agreement."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.embedded.loop import EmbeddedRun
from harness.embedded.samples import Sample


def sample(index, response_len, logprob_len):
    return Sample(
        index=index,
        group_index=0,
        prompt_ids=[1, 2],
        response_ids=list(range(response_len)),
        rollout_log_probs=[-0.5] * logprob_len,
        rollout_ranks=[None] * logprob_len,
        loss_mask=[1] * response_len,
        label="1",
        response_text="",
        finish_reason="stop",
        rollout_weight_version=0,
    )


def trainer(reorder=False):
    return SimpleNamespace(s=SimpleNamespace(faults=SimpleNamespace(reorder_samples=reorder)))


def test_equal_lengths_pass_through_unchanged():
    samples = [sample(0, 4, 4), sample(1, 3, 3)]
    lps, _ = EmbeddedRun._seen_rollout_logprobs(trainer(), samples)
    assert lps == [[-0.5] * 4, [-0.5] * 3]


def test_short_rollout_logprobs_raise_naming_the_sample():
    with pytest.raises(ValueError, match="sample 1: the rollout returned 2 log-probs for a 3-token response"):
        EmbeddedRun._seen_rollout_logprobs(trainer(), [sample(0, 4, 4), sample(1, 3, 2)])


def test_the_reorder_fault_still_delivers_another_samples_logprobs():
    lps, _ = EmbeddedRun._seen_rollout_logprobs(trainer(reorder=True), [sample(0, 4, 4), sample(1, 3, 3)])
    assert [len(x) for x in lps] == [4, 3]  # the injected fault is what probe 1 must catch
