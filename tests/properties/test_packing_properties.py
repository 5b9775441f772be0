"""THD packing with cu_seqlens: round trip and the shape of cu_seqlens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from harness.layout.packing import pack_sequences, unpack_sequences

pytestmark = pytest.mark.property

sample_lengths = st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=8)
pad_multiples = st.sampled_from([1, 2, 4, 8, 128])


def make_samples(lengths: list[int], width: int | None = None) -> list[torch.Tensor]:
    # Sample i holds values 1000*i + position, so a mix-up between samples is visible in the note.
    rows = [torch.arange(length) + 1000 * index for index, length in enumerate(lengths)]
    if width is None:
        return rows
    return [row.unsqueeze(-1).repeat(1, width) for row in rows]


@given(lengths=sample_lengths, pad_multiple=pad_multiples, width=st.sampled_from([None, 3]))
@settings(max_examples=200, deadline=None)
def test_unpack_returns_exactly_the_packed_samples(lengths, pad_multiple, width):
    samples = make_samples(lengths, width)
    packed = pack_sequences(samples, pad_multiple=pad_multiple, pad_value=-1)
    note(f"lengths={lengths} pad_multiple={pad_multiple} cu_seqlens={packed.cu_seqlens.tolist()}")
    unpacked = unpack_sequences(packed)
    assert len(unpacked) == len(samples)
    for index, (got, expected) in enumerate(zip(unpacked, samples)):
        assert torch.equal(got, expected), f"sample {index}: got {got.tolist()} expected {expected.tolist()}"


@given(lengths=sample_lengths, pad_multiple=pad_multiples)
@settings(max_examples=200, deadline=None)
def test_cu_seqlens_start_at_zero_follow_the_lengths_and_end_at_the_padded_stream(lengths, pad_multiple):
    packed = pack_sequences(make_samples(lengths), pad_multiple=pad_multiple, pad_value=-1)
    bounds = packed.cu_seqlens.tolist()
    note(f"lengths={lengths} pad_multiple={pad_multiple} cu_seqlens={bounds}")
    assert bounds[0] == 0
    assert [bounds[i + 1] - bounds[i] for i in range(len(lengths))] == lengths
    assert bounds[-1] == packed.tokens.shape[0]
    assert packed.tokens.shape[0] % pad_multiple == 0
    assert 0 <= packed.padding < pad_multiple
    assert len(bounds) == len(lengths) + 1 + (1 if packed.padding else 0), "padding must be its own segment"
    assert (packed.tokens[bounds[len(lengths)] :] == -1).all(), "the padding segment holds real tokens"
    assert packed.max_seqlen == max(lengths + [packed.padding])
