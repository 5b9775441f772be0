"""Dynamic micro-batching and balance-data partitioning: every sample exactly once, budgets, balance."""

from __future__ import annotations

import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from harness.layout.dynamic_batching import (
    SampleOverBudgetError,
    dynamic_micro_batches,
    first_fit_bins,
)
from harness.layout.partitioning import (
    balanced_dp_partitions,
    karmarkar_karp_partitions,
    round_robin_dp_partitions,
)

pytestmark = pytest.mark.property

token_counts = st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=40)


def assert_each_sample_once(groups: list[list[int]], num_samples: int) -> None:
    flat = sorted(i for group in groups for i in group)
    missing = sorted(set(range(num_samples)) - set(flat))
    duplicated = sorted({i for i in flat if flat.count(i) > 1})
    assert flat == list(range(num_samples)), f"missing samples {missing}, duplicated samples {duplicated}"


# --- dynamic batching ------------------------------------------------------------------------


@given(lengths=token_counts, budget=st.integers(min_value=1, max_value=400), cp_size=st.sampled_from([1, 2]))
@example(lengths=[3, 3, 2, 2, 2], budget=6, cp_size=1)  # VIME's KK split would be 7 + 5 here
@settings(max_examples=300, deadline=None)
def test_micro_batches_hold_every_sample_once_and_none_is_over_budget(lengths, budget, cp_size):
    too_long = [i for i, length in enumerate(lengths) if length > budget * cp_size]
    if too_long:
        with pytest.raises(SampleOverBudgetError, match=f"sample {too_long[0]} has {lengths[too_long[0]]} tokens"):
            dynamic_micro_batches(lengths, budget, cp_size=cp_size)
        return
    plan = dynamic_micro_batches(lengths, budget, cp_size=cp_size)
    sums = [sum(lengths[i] for i in batch) for batch in plan.micro_batches]
    note(f"strategy={plan.strategy} batches={plan.micro_batches} token sums={sums} budget={plan.token_budget}")
    assert_each_sample_once(plan.micro_batches, len(lengths))
    assert max(sums) <= budget * cp_size, f"a micro-batch holds {max(sums)} tokens, budget {budget * cp_size}"
    # VIME's micro-batch count: the number of bins first fit needs.
    assert len(plan.micro_batches) == len(first_fit_bins(lengths, budget * cp_size))


@given(lengths=token_counts, budget=st.integers(min_value=200, max_value=400))
@settings(max_examples=200, deadline=None)
def test_the_balanced_split_is_used_whenever_it_fits_the_budget(lengths, budget):
    plan = dynamic_micro_batches(lengths, budget)
    count = len(first_fit_bins(lengths, budget))
    kk = karmarkar_karp_partitions(lengths, count, equal_size=False)
    kk_fits = all(sum(lengths[i] for i in group) <= budget for group in kk)
    note(f"strategy={plan.strategy} kk={kk} kk_fits={kk_fits}")
    assert plan.strategy == ("karmarkar-karp" if kk_fits else "first-fit")


def test_vimes_balanced_split_can_exceed_the_budget_so_first_fit_is_used_instead():
    # First fit needs 2 bins of <= 6; Karmarkar-Karp into 2 gives sums 7 and 5.
    kk = karmarkar_karp_partitions([3, 3, 2, 2, 2], 2, equal_size=False)
    assert sorted(sum([3, 3, 2, 2, 2][i] for i in group) for group in kk) == [5, 7]
    plan = dynamic_micro_batches([3, 3, 2, 2, 2], 6)
    assert plan.strategy == "first-fit" and plan.micro_batches == [[0, 1], [2, 3, 4]]


# --- balance-data across DP ranks -----------------------------------------------------------


@given(data=st.data(), dp_size=st.integers(min_value=1, max_value=8))
@settings(max_examples=300, deadline=None)
def test_balance_data_keeps_every_sample_once_with_equal_counts_and_balanced_tokens(data, dp_size):
    multiple = data.draw(st.integers(min_value=1, max_value=6), label="samples per rank")
    lengths = data.draw(st.lists(st.integers(1, 500), min_size=dp_size * multiple, max_size=dp_size * multiple), label="lengths")
    partitions = balanced_dp_partitions(lengths, dp_size)
    sums = [sum(lengths[i] for i in part) for part in partitions]
    note(f"partitions={partitions} token sums={sums}")
    assert len(partitions) == dp_size
    assert_each_sample_once(partitions, len(lengths))
    assert {len(part) for part in partitions} == {multiple}, "--balance-data gives every rank the same count"
    assert all(part == sorted(part) for part in partitions)
    # Karmarkar-Karp's bound: the spread never exceeds one sample.
    assert max(sums) - min(sums) <= max(lengths), f"spread {max(sums) - min(sums)} > longest sample {max(lengths)}"


@given(lengths=st.lists(st.integers(1, 500), min_size=1, max_size=30), dp_size=st.integers(1, 8))
@settings(max_examples=300, deadline=None)
def test_balance_data_falls_back_to_unequal_counts_when_not_divisible(lengths, dp_size):
    if len(lengths) < dp_size:
        with pytest.raises(ValueError, match="cannot fill"):
            balanced_dp_partitions(lengths, dp_size)
        return
    partitions = balanced_dp_partitions(lengths, dp_size)
    sums = [sum(lengths[i] for i in part) for part in partitions]
    note(f"partitions={partitions} token sums={sums}")
    assert_each_sample_once(partitions, len(lengths))
    assert max(sums) - min(sums) <= max(lengths)


def two_way_differencing(lengths: list[int]) -> int:
    """Karmarkar-Karp for two partitions, as the textbook states it: replace the two largest
    numbers by their difference until one is left; that number is the partition's spread."""
    numbers = sorted(lengths)
    while len(numbers) > 1:
        largest, second = numbers.pop(), numbers.pop()
        numbers.append(largest - second)
        numbers.sort()
    return numbers[0]


@given(lengths=st.lists(st.integers(1, 500), min_size=2, max_size=30))
@settings(max_examples=300, deadline=None)
def test_two_way_split_has_the_textbook_differencing_spread(lengths):
    partitions = karmarkar_karp_partitions(lengths, 2, equal_size=False)
    sums = [sum(lengths[i] for i in part) for part in partitions]
    note(f"partitions={partitions} token sums={sums}")
    assert_each_sample_once(partitions, len(lengths))
    assert abs(sums[0] - sums[1]) == two_way_differencing(lengths)


@given(num_samples=st.integers(0, 50), dp_size=st.integers(1, 8))
@settings(max_examples=200, deadline=None)
def test_round_robin_gives_rank_i_the_samples_congruent_to_i(num_samples, dp_size):
    partitions = round_robin_dp_partitions(num_samples, dp_size)
    assert_each_sample_once(partitions, num_samples)
    for rank, part in enumerate(partitions):
        assert all(i % dp_size == rank for i in part), f"rank {rank} got {part}"
