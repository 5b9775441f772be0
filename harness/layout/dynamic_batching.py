"""Dynamic micro-batching by a token budget per GPU (`--use-dynamic-batch-size --max-tokens-per-gpu`).

Mirrors VIME's `get_data_iterator` (backends/megatron_utils/data.py): for each step's local
samples, the micro-batch count is the number of bins first-fit needs under
`max_tokens_per_gpu * cp_size` (`get_minimum_num_micro_batch_size`), and the samples are then
spread over that many micro-batches by Karmarkar-Karp (equal_size=False) to balance tokens.

Where this differs from VIME, on purpose: KK balances sums but does not know the budget, so
VIME's balanced split can put a micro-batch over `max_tokens_per_gpu` (e.g. lengths
[3, 3, 2, 2, 2] with a budget of 6: first fit needs 2 bins, KK gives 7 + 5). Here the balanced
split is used only when every micro-batch fits; otherwise the first-fit bins are returned
(`MicroBatchPlan.strategy` says which). And where VIME lets one over-long sample sit alone in
an over-budget micro-batch, this raises `SampleOverBudgetError`, naming the sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.layout.partitioning import karmarkar_karp_partitions

__all__ = [
    "SampleOverBudgetError",
    "MicroBatchPlan",
    "first_fit_bins",
    "dynamic_micro_batches",
]


class SampleOverBudgetError(ValueError):
    """A single sample is longer than the token budget of one micro-batch."""


@dataclass(frozen=True)
class MicroBatchPlan:
    """Micro-batches as lists of sample indices, and which strategy produced them."""

    micro_batches: list[list[int]]
    token_budget: int
    strategy: str  # "karmarkar-karp" (VIME's balanced split) or "first-fit" (fallback)


def first_fit_bins(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """First-fit bin packing in sample order; a sample longer than `budget` gets a bin alone."""
    bins: list[list[int]] = []
    sums: list[int] = []
    for index, length in enumerate(lengths):
        for b, current in enumerate(sums):
            if current + length <= budget:
                bins[b].append(index)
                sums[b] += length
                break
        else:
            bins.append([index])
            sums.append(length)
    return bins


def dynamic_micro_batches(lengths: Sequence[int], max_tokens_per_gpu: int, cp_size: int = 1, balance: bool = True) -> MicroBatchPlan:
    """Every sample in exactly one micro-batch, none over `max_tokens_per_gpu * cp_size` tokens."""
    if max_tokens_per_gpu < 1 or cp_size < 1:
        raise ValueError(f"max_tokens_per_gpu={max_tokens_per_gpu}, cp_size={cp_size}: both must be >= 1")
    budget = max_tokens_per_gpu * cp_size
    for index, length in enumerate(lengths):
        if length > budget:
            raise SampleOverBudgetError(
                f"sample {index} has {length} tokens, more than one micro-batch may hold "
                f"(--max-tokens-per-gpu {max_tokens_per_gpu} x context-parallel {cp_size} = "
                f"{budget}); raise --max-tokens-per-gpu or --context-parallel-size, or lower "
                "--rollout-max-response-len"
            )
    if len(lengths) == 0:
        return MicroBatchPlan([], budget, "first-fit")
    bins = first_fit_bins(lengths, budget)
    if balance:
        balanced = karmarkar_karp_partitions(lengths, len(bins), equal_size=False)
        if all(sum(lengths[i] for i in group) <= budget for group in balanced):
            return MicroBatchPlan(balanced, budget, "karmarkar-karp")
    return MicroBatchPlan(bins, budget, "first-fit")
