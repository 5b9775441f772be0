"""Target shift and loss-mask slicing: logit t predicts token t+1, the response slice, mask alignment."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from harness.layout.token_shift import (
    align_loss_mask,
    response_gather_positions,
    response_logprob_slice,
    response_loss_mask,
    response_token_slice,
    selected_token_logprobs,
)

pytestmark = pytest.mark.property

prompt_lengths = st.integers(min_value=1, max_value=12)
response_lengths = st.integers(min_value=0, max_value=12)


@given(prompt_len=prompt_lengths, response_len=response_lengths)
@settings(max_examples=200, deadline=None)
def test_logprob_positions_are_the_token_positions_shifted_back_by_one(prompt_len, response_len):
    total = prompt_len + response_len
    logits_at = response_logprob_slice(total, response_len)
    targets_at = response_token_slice(total, response_len)
    logit_positions = list(range(total))[logits_at]
    token_positions = list(range(total))[targets_at]
    note(f"total={total} logit positions={logit_positions} token positions={token_positions}")
    assert len(logit_positions) == len(token_positions) == response_len
    assert [p + 1 for p in logit_positions] == token_positions
    assert token_positions == list(range(prompt_len, total))


@given(prompt_len=prompt_lengths, mask=st.lists(st.integers(0, 1), min_size=0, max_size=12))
@settings(max_examples=200, deadline=None)
def test_aligned_loss_mask_sits_exactly_under_the_response_logits(prompt_len, mask):
    total = prompt_len + len(mask)
    aligned = align_loss_mask(torch.tensor(mask, dtype=torch.float32), total)
    note(f"total={total} mask={mask} aligned={aligned.tolist()}")
    assert aligned.numel() == total
    inside = response_logprob_slice(total, len(mask))
    assert aligned[inside].tolist() == [float(m) for m in mask]
    outside = torch.ones(total, dtype=torch.bool)
    outside[inside] = False
    assert aligned[outside].sum() == 0, "mask entries leaked outside the response logits"


@given(
    prompt_len=prompt_lengths,
    response_len=st.integers(min_value=1, max_value=8),
    vocab=st.integers(min_value=2, max_value=16),
    seed=st.integers(min_value=0, max_value=2**16),
    temperature=st.sampled_from([1.0, 0.7, 1.3]),
)
@settings(max_examples=100, deadline=None)
def test_selected_logprobs_equal_a_position_by_position_reference(prompt_len, response_len, vocab, seed, temperature):
    generator = torch.Generator().manual_seed(seed)
    total = prompt_len + response_len
    logits = torch.randn(total, vocab, generator=generator) * 3
    tokens = torch.randint(0, vocab, (total,), generator=generator)
    got = selected_token_logprobs(logits, tokens, response_len, temperature=temperature)
    expected = torch.stack([torch.log_softmax(logits[prompt_len + j - 1] / temperature, dim=-1)[tokens[prompt_len + j]] for j in range(response_len)])
    note(f"tokens={tokens.tolist()} prompt_len={prompt_len} got={got.tolist()} expected={expected.tolist()}")
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_a_row_without_a_prompt_token_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="at least one token"):
        response_logprob_slice(total_len=4, response_len=4)


@given(prompt_len=prompt_lengths, response_len=response_lengths, slice_shift=st.sampled_from([0, -1]), target_shift=st.sampled_from([0, 1]))
@settings(max_examples=200, deadline=None)
def test_the_trainers_gather_positions_are_the_layout_slices_plus_only_the_injected_shifts(prompt_len, response_len, slice_shift, target_shift):
    # harness.embedded.policy gathers its log-probs at exactly these positions.
    from harness.embedded import policy

    assert policy.response_gather_positions is response_gather_positions
    total = prompt_len + response_len
    columns, targets = response_gather_positions(prompt_len, response_len, slice_shift, target_shift)
    expected = [max(c + slice_shift, 0) for c in range(*response_logprob_slice(total, response_len).indices(total))]
    note(f"columns={columns} targets={targets}")
    assert columns == expected
    assert targets == [c + 1 + target_shift for c in columns]
    if slice_shift == 0 and target_shift == 0:
        assert targets == list(range(*response_token_slice(total, response_len).indices(total)))


@given(prompt_len=prompt_lengths, mask=st.lists(st.integers(0, 1), min_size=0, max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_trainers_loss_mask_is_the_aligned_mask_at_its_gather_positions(prompt_len, mask):
    # harness.embedded.loop builds every loss mask with response_loss_mask: the mask its gathered
    # log-prob j is weighted by must be the aligned mask at that log-prob's logit position.
    from harness.embedded import loop

    assert loop.response_loss_mask is response_loss_mask
    total = prompt_len + len(mask)
    trainer_mask = response_loss_mask(mask, total)
    columns, _ = response_gather_positions(prompt_len, len(mask))
    aligned = align_loss_mask(torch.tensor(mask, dtype=torch.float32), total)
    note(f"mask={mask} trainer={trainer_mask.tolist()} columns={columns}")
    assert trainer_mask.dtype == torch.float32
    assert trainer_mask.tolist() == aligned[columns].tolist() == [float(m) for m in mask]
