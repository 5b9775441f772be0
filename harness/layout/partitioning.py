"""Balance-data partitioning of a rollout's samples across data-parallel ranks.

Mirrors VIME's `RolloutManager._split_train_data_by_dp` (vime/ray/rollout.py) and slime's
`slime/utils/seqlen_balancing.py`, read in November 2026:

* `--balance-data`: `get_seqlen_balanced_partitions(total_lengths, dp_size, equal_size=True)`,
  the Karmarkar-Karp largest differencing method over token counts, every rank receiving the
  same number of samples; newer VIME falls back to `equal_size=False` (with a warning) when the
  sample count is not divisible by dp_size. Each partition's indices are sorted.
* without it: round robin, rank i takes samples i, i + dp_size, i + 2*dp_size, ...

The same partitioner balances micro-batches inside a step (equal_size=False), see
`dynamic_batching`. This is our own implementation of the method, tested by properties.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "karmarkar_karp_partitions",
    "balanced_dp_partitions",
    "round_robin_dp_partitions",
]


@dataclass
class _State:
    """k partial partitions, kept sorted by token sum, largest first."""

    sums: list[int]
    members: list[list[int]]
    order_key: int = field(default=0)

    @property
    def spread(self) -> int:
        return self.sums[0] - self.sums[-1]

    def heap_key(self) -> tuple:
        # Largest spread first; ties: the largest set first, then insertion order (determinism).
        return (-self.spread, -self.sums[0], self.order_key)

    def merge(self, other: _State) -> None:
        # Pair this state's largest set with the other's smallest: differencing.
        k = len(self.sums)
        for i in range(k):
            self.sums[i] += other.sums[k - 1 - i]
            self.members[i].extend(other.members[k - 1 - i])
        order = sorted(range(k), key=lambda i: (-self.sums[i], len(self.members[i])))
        self.sums = [self.sums[i] for i in order]
        self.members = [self.members[i] for i in order]


def _initial_states(lengths: Sequence[int], k: int, equal_size: bool) -> list[_State]:
    ranked = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    states = []
    if equal_size:
        # Each starting state deals one item to every partition, so sizes stay equal.
        for offset in range(0, len(ranked), k):
            group = ranked[offset : offset + k]
            group.sort(key=lambda i: (-lengths[i], i))
            states.append(_State([lengths[i] for i in group], [[i] for i in group]))
    else:
        for i in ranked:
            states.append(_State([lengths[i]] + [0] * (k - 1), [[i]] + [[] for _ in range(k - 1)]))
    return states


def karmarkar_karp_partitions(lengths: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
    """Split item indices into k groups with near-equal sums (largest differencing method).

    The spread (largest sum minus smallest) never exceeds the largest single length: merging
    two states never increases the larger of their spreads, and every starting state's spread
    is at most one item.
    """
    if k < 1:
        raise ValueError(f"k={k}: expected at least one partition")
    if len(lengths) < k:
        raise ValueError(f"{len(lengths)} samples cannot fill {k} partitions; need at least {k}")
    if any(length < 0 for length in lengths):
        raise ValueError("lengths must be non-negative token counts")
    if equal_size and len(lengths) % k:
        raise ValueError(f"equal_size needs len(lengths) % k == 0, got {len(lengths)} % {k}")
    heap = []
    for order_key, state in enumerate(_initial_states(lengths, k, equal_size)):
        state.order_key = order_key
        heapq.heappush(heap, (state.heap_key(), order_key, state))
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, (first.heap_key(), first.order_key, first))
    return [sorted(group) for group in heap[0][2].members]


def balanced_dp_partitions(total_lengths: Sequence[int], dp_size: int) -> list[list[int]]:
    """VIME's `--balance-data` split: equal-count KK partitions, unequal-count when not divisible."""
    if dp_size < 1:
        raise ValueError(f"dp_size={dp_size}: expected at least 1 data-parallel rank")
    equal_size = len(total_lengths) % dp_size == 0
    return karmarkar_karp_partitions(total_lengths, dp_size, equal_size=equal_size)


def round_robin_dp_partitions(num_samples: int, dp_size: int) -> list[list[int]]:
    """VIME's split without `--balance-data`: rank i takes samples i, i+dp_size, ..."""
    if dp_size < 1:
        raise ValueError(f"dp_size={dp_size}: expected at least 1")
    return [list(range(rank, num_samples, dp_size)) for rank in range(dp_size)]
