"""Context-parallel zigzag split into 2*CP chunks, its inverse, and CP-sliced response log-probs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from harness.layout.context_parallel import (
    merge_response_from_ranks,
    slice_response_for_rank,
    zigzag_chunk_size,
    zigzag_merge,
    zigzag_rank_slice,
    zigzag_split,
)

pytestmark = pytest.mark.property

cp_sizes = st.sampled_from([1, 2, 3, 4, 8])


@given(length=st.integers(min_value=1, max_value=80), cp_size=cp_sizes)
@settings(max_examples=300, deadline=None)
def test_zigzag_merge_inverts_the_split(length, cp_size):
    row = torch.arange(length)
    parts = zigzag_split(row, cp_size, pad_value=-1)
    note(f"length={length} cp={cp_size} per-rank={[p.tolist() for p in parts]}")
    assert all(p.shape[0] == 2 * zigzag_chunk_size(length, cp_size) or cp_size == 1 for p in parts)
    assert torch.equal(zigzag_merge(parts, length), row)


@given(chunk=st.integers(min_value=1, max_value=10), cp_size=cp_sizes)
@settings(max_examples=200, deadline=None)
def test_zigzag_gives_every_rank_the_same_causal_attention_work(chunk, cp_size):
    # Under a causal mask the token at position p attends to p + 1 keys; zigzag pairs an early
    # chunk with a late one so every rank's total is the same.
    length = 2 * cp_size * chunk
    work = [int((zigzag_rank_slice(torch.arange(length), cp_size, r) + 1).sum()) for r in range(cp_size)]
    held = sorted(int(p) for r in range(cp_size) for p in zigzag_rank_slice(torch.arange(length), cp_size, r))
    note(f"cp={cp_size} chunk={chunk} work per rank={work}")
    assert held == list(range(length)), "ranks must hold every position exactly once"
    assert len(set(work)) == 1, f"unbalanced causal work across ranks: {work}"


@given(
    prompt_len=st.integers(min_value=1, max_value=30),
    response_len=st.integers(min_value=0, max_value=30),
    cp_size=cp_sizes,
)
@settings(max_examples=300, deadline=None)
def test_response_logprobs_sliced_per_rank_merge_back_and_match_the_token_split(prompt_len, response_len, cp_size):
    total = prompt_len + response_len
    values = torch.arange(response_len, dtype=torch.float32) + 0.5
    per_rank = [slice_response_for_rank(values, total, response_len, cp_size, r) for r in range(cp_size)]
    note(f"total={total} response={response_len} cp={cp_size} per-rank={[p.tolist() for p in per_rank]}")
    assert torch.equal(merge_response_from_ranks(per_rank, total, response_len), values)
    # The same values placed at their logit positions in the row and zigzag-split as tokens are:
    # each rank must hold exactly its response slice, in the same order.
    row = torch.full((total,), float("nan"))
    row[prompt_len - 1 : total - 1] = values
    for rank in range(cp_size):
        on_rank = zigzag_rank_slice(row, cp_size, rank, pad_value=float("nan"))
        expected = on_rank[~torch.isnan(on_rank)]
        assert torch.equal(per_rank[rank], expected), f"rank {rank}: {per_rank[rank].tolist()} vs {expected.tolist()}"
