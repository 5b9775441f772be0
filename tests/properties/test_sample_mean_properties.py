"""VIME's sample-mean reduction of |dlogp| over loss-mask tokens, for any batch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from harness.layout.context_parallel import slice_response_for_rank
from harness.layout.sample_mean import sample_mean_abs_diff

pytestmark = pytest.mark.property

abs_diffs = st.floats(min_value=0.0, max_value=5.0, allow_nan=False, width=32)


@st.composite
def batches(draw, max_samples: int = 8, max_len: int = 12):
    """(diffs, masks) per sample; plain lists so a shrunk counterexample prints as numbers."""
    count = draw(st.integers(min_value=1, max_value=max_samples), label="samples")
    diffs, masks = [], []
    for _ in range(count):
        length = draw(st.integers(min_value=0, max_value=max_len))
        diffs.append(draw(st.lists(abs_diffs, min_size=length, max_size=length)))
        masks.append(draw(st.lists(st.integers(0, 1), min_size=length, max_size=length)))
    return diffs, masks


def reference(diffs: list[list[float]], masks: list[list[int]], per_token: bool) -> float:
    """The metric written out by hand, in plain Python floats."""
    if per_token:
        total = sum(d * m for ds, ms in zip(diffs, masks) for d, m in zip(ds, ms))
        return total / max(sum(sum(ms) for ms in masks), 1)
    per_sample = [sum(d * m for d, m in zip(ds, ms)) / max(sum(ms), 1) for ds, ms in zip(diffs, masks)]
    return sum(per_sample) / len(per_sample)


def tensors(rows):
    return [torch.tensor(row, dtype=torch.float32) for row in rows]


@given(batch=batches(), per_token=st.booleans())
@settings(max_examples=200, deadline=None)
def test_sample_mean_equals_the_reference_for_any_batch(batch, per_token):
    diffs, masks = batch
    got = sample_mean_abs_diff(tensors(diffs), tensors(masks), per_token=per_token)
    expected = reference(diffs, masks, per_token)
    note(f"per_token={per_token} got={got!r} expected={expected!r}")
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)


@given(batch=batches(), seed=st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_sample_order_does_not_change_the_metric(batch, seed):
    diffs, masks = batch
    order = list(range(len(diffs)))
    seed.shuffle(order)
    before = sample_mean_abs_diff(tensors(diffs), tensors(masks))
    after = sample_mean_abs_diff(tensors([diffs[i] for i in order]), tensors([masks[i] for i in order]))
    note(f"order={order}")
    assert after == pytest.approx(before, rel=1e-12, abs=1e-15)


@given(batch=batches(max_len=30), cp_size=st.sampled_from([2, 4]), prompt_len=st.integers(1, 20))
@settings(max_examples=120, deadline=None)
def test_cp_sliced_reduction_as_vime_does_it_equals_the_full_sample_mean(batch, cp_size, prompt_len):
    # VIME under CP: each rank sums |dlogp| * mask over its zigzag part of each response, divides
    # by that sample's full mask count, and the ranks' sums are all-reduced.
    diffs, masks = batch
    total = 0.0
    for ds, ms in zip(diffs, masks):
        response_len = len(ds)
        row_len = prompt_len + response_len
        denominator = max(sum(ms), 1)
        for rank in range(cp_size):
            d = slice_response_for_rank(torch.tensor(ds, dtype=torch.float64), row_len, response_len, cp_size, rank)
            m = slice_response_for_rank(torch.tensor(ms, dtype=torch.float64), row_len, response_len, cp_size, rank)
            total += float((d * m).sum()) / denominator
    via_cp = total / len(diffs)
    direct = sample_mean_abs_diff(tensors(diffs), tensors(masks))
    note(f"via CP={via_cp!r} direct={direct!r}")
    assert via_cp == pytest.approx(direct, rel=1e-6, abs=1e-9)


@given(batch=batches(), per_token=st.booleans())
@settings(max_examples=200, deadline=None)
def test_the_embedded_trainers_reduction_agrees_with_this_one(batch, per_token):
    # The embedded trainer reduces its loss and logs the metric with the layout's differentiable
    # masked_sample_mean (the very function, not a copy); the audit uses sample_mean_abs_diff (fp64).
    # They must agree for any batch, or "the audit's sample-mean reproduces the logged abs-diff"
    # would compare two different definitions.
    from harness.embedded.grpo import sample_mean as trainer_sample_mean
    from harness.layout.sample_mean import masked_sample_mean

    assert trainer_sample_mean is masked_sample_mean

    diffs, masks = batch
    trainer = float(trainer_sample_mean(tensors(diffs), tensors(masks), per_token))
    layout = sample_mean_abs_diff(tensors(diffs), tensors(masks), per_token=per_token)
    note(f"per_token={per_token} trainer={trainer!r} layout={layout!r}")
    assert trainer == pytest.approx(layout, rel=1e-5, abs=1e-7)


def test_a_short_and_a_long_response_weigh_the_same_unless_per_token():
    diffs = tensors([[1.0], [0.0, 0.0, 0.0]])
    masks = tensors([[1], [1, 1, 1]])
    assert sample_mean_abs_diff(diffs, masks) == pytest.approx(0.5)
    assert sample_mean_abs_diff(diffs, masks, per_token=True) == pytest.approx(0.25)


def test_mismatched_lengths_name_the_sample():
    with pytest.raises(ValueError, match="sample 1 has 2 diff values but a loss mask of 3"):
        sample_mean_abs_diff(tensors([[0.1], [0.1, 0.2]]), tensors([[1], [1, 1, 1]]))


@given(batch=batches(), per_token=st.booleans())
@settings(max_examples=100, deadline=None)
def test_the_trainers_reduction_equals_the_reference_and_carries_gradients(batch, per_token):
    from harness.layout.sample_mean import masked_sample_mean

    diffs, masks = batch
    values = [t.requires_grad_() for t in tensors(diffs)]
    reduced = masked_sample_mean(values, tensors(masks), per_token)
    assert reduced.dtype == torch.float32  # reduced in the trainer's dtype, not upcast
    assert float(reduced) == pytest.approx(reference(diffs, masks, per_token), rel=1e-5, abs=1e-6)
    reduced.backward()
    # d(metric)/d(value) is the token's weight: mask / max(sample mask count, 1) / samples (or / step count).
    count = max(sum(sum(m) for m in masks), 1)
    for value, mask in zip(values, masks):
        weight = [m / count if per_token else m / max(sum(mask), 1) / len(masks) for m in mask]
        assert value.grad.tolist() == pytest.approx(weight, rel=1e-5, abs=1e-7)


@given(batch=batches(), per_token=st.booleans(), data=st.data())
@settings(max_examples=200, deadline=None)
def test_micro_batch_shares_compose_the_step_value(batch, per_token, data):
    # The trainer reduces each micro-batch with masked_sample_mean and weighs it by micro_batch_share;
    # for any split of the step into micro-batches the sum must be the step's own value (VIME's).
    from harness.embedded import loop
    from harness.layout.sample_mean import masked_sample_mean, micro_batch_share

    assert loop.micro_batch_share is micro_batch_share
    diffs, masks = batch
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(diffs) - 1, 1)), max_size=len(diffs)), label="cuts") - {len(diffs)})
    bounds = [0, *cuts, len(diffs)]
    values, step_masks = tensors(diffs), tensors(masks)
    composed = 0.0
    for start, end in zip(bounds, bounds[1:]):
        micro = step_masks[start:end]
        composed += float(masked_sample_mean(values[start:end], micro, per_token)) * micro_batch_share(micro, step_masks, per_token)
    note(f"bounds={bounds} per_token={per_token} composed={composed!r}")
    assert composed == pytest.approx(reference(diffs, masks, per_token), rel=1e-5, abs=1e-6)
