"""Vocab sharding and the log-sum-exp merge against the full-vocabulary reduce."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from harness.layout.vocab_parallel import (
    full_logsumexp,
    full_token_logprobs,
    shard_vocab,
    sharded_logsumexp,
    sharded_selected_logit,
    sharded_token_logprobs,
)

pytestmark = pytest.mark.property


@st.composite
def logits_and_targets(draw):
    tp_size = draw(st.sampled_from([1, 2, 4, 8]), label="tp_size")
    per_rank = draw(st.integers(min_value=1, max_value=12), label="vocab per rank")
    rows = draw(st.integers(min_value=1, max_value=4), label="rows")
    vocab = tp_size * per_rank
    values = draw(
        hnp.arrays(np.float32, (rows, vocab), elements=st.floats(-60, 60, width=32, allow_subnormal=False)),
        label="logits",
    )
    targets = draw(st.lists(st.integers(0, vocab - 1), min_size=rows, max_size=rows), label="targets")
    return torch.from_numpy(values), torch.tensor(targets), tp_size


@given(case=logits_and_targets())
@settings(max_examples=300, deadline=None)
def test_native_merge_equals_the_full_reduce_within_rounding(case):
    logits, targets, tp_size = case
    shards = shard_vocab(logits, tp_size)
    merged, full = sharded_logsumexp(shards), full_logsumexp(logits)
    note(f"merged lse={merged.tolist()} full lse={full.tolist()}")
    torch.testing.assert_close(merged, full, rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(sharded_token_logprobs(shards, targets), full_token_logprobs(logits, targets), rtol=2e-6, atol=4e-6)


@given(case=logits_and_targets())
@settings(max_examples=300, deadline=None)
def test_fixed_order_merge_equals_the_full_reduce_exactly(case):
    logits, targets, tp_size = case
    shards = shard_vocab(logits, tp_size)
    merged = sharded_token_logprobs(shards, targets, mode="fixed-order")
    full = full_token_logprobs(logits, targets, mode="fixed-order")
    note(f"merged={merged.tolist()} full={full.tolist()} diff={(merged - full).tolist()}")
    assert torch.equal(sharded_logsumexp(shards, "fixed-order"), full_logsumexp(logits, "fixed-order"))
    assert torch.equal(merged, full)


@given(case=logits_and_targets())
@settings(max_examples=200, deadline=None)
def test_the_selected_logit_comes_from_exactly_one_rank(case):
    logits, targets, tp_size = case
    got = sharded_selected_logit(shard_vocab(logits, tp_size), targets)
    expected = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    note(f"targets={targets.tolist()} got={got.tolist()} expected={expected.tolist()}")
    assert torch.equal(got, expected)


def test_a_vocab_that_does_not_divide_by_tp_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="make-vocab-size-divisible-by"):
        shard_vocab(torch.zeros(2, 10), tp_size=4)
