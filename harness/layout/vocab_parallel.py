"""Vocab sharding across tensor-parallel ranks and the log-sum-exp merge.

Mirrors Megatron-Core's vocab-parallel log-softmax as VIME uses it for trainer log-probs
(`tensor_parallel.cross_entropy` / `VocabUtility`): rank r owns the
contiguous vocab range [r * V/tp, (r + 1) * V/tp); each rank takes the max of its logits, the
maxima are all-reduced with MAX, each rank sums exp(logit - global max) and the sums are
all-reduced with SUM; the selected token's logit comes from the rank that owns it (the others
contribute 0 to a SUM all-reduce). log-prob = selected - (global max + log(sum)).

Two reduction modes:
* "native": the sums are reduced the way torch reduces them (blocked / pairwise, order not
  specified), so the merged result equals the full-vocabulary `torch.logsumexp` within
  rounding, not bit for bit. This is the drift probe 5 looks at.
* "fixed-order": every sum is a strict left-to-right accumulation over the vocabulary, the
  sharded one carrying its running total from rank r to rank r + 1 (a ring reduce in rank
  order). Same additions in the same order, so it equals the full reduce in the same mode
  exactly.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "vocab_range",
    "shard_vocab",
    "sharded_logsumexp",
    "sharded_selected_logit",
    "sharded_token_logprobs",
    "full_logsumexp",
    "full_token_logprobs",
]

MODES = ("native", "fixed-order")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")


def vocab_range(rank: int, vocab_size: int, tp_size: int) -> tuple[int, int]:
    """[start, end) of the vocab ids rank `rank` owns (Megatron: equal contiguous ranges)."""
    if tp_size < 1 or not 0 <= rank < tp_size:
        raise ValueError(f"rank={rank}, tp_size={tp_size}: expected 0 <= rank < tp_size")
    if vocab_size % tp_size:
        raise ValueError(
            f"vocab_size={vocab_size} is not divisible by tp_size={tp_size}; Megatron pads the "
            "vocabulary (--make-vocab-size-divisible-by) before sharding it"
        )
    per_rank = vocab_size // tp_size
    return rank * per_rank, (rank + 1) * per_rank


def shard_vocab(logits: torch.Tensor, tp_size: int) -> list[torch.Tensor]:
    """Each rank's slice of the last (vocab) dimension."""
    vocab_size = logits.shape[-1]
    return [logits[..., slice(*vocab_range(r, vocab_size, tp_size))] for r in range(tp_size)]


def _sequential_sum(values: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
    """Strict left-to-right sum over the last dim (numpy's accumulate is sequential), same dtype."""
    array = values.detach().cpu().numpy()
    if start is not None:
        array = np.concatenate([start.detach().cpu().numpy()[..., None], array], axis=-1)
    if array.shape[-1] == 0:
        return torch.zeros(array.shape[:-1], dtype=values.dtype)
    return torch.from_numpy(np.add.accumulate(array, axis=-1)[..., -1].copy())


def _global_max(shards: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([shard.max(dim=-1).values for shard in shards]).max(dim=0).values


def sharded_logsumexp(shards: list[torch.Tensor], mode: str = "native") -> torch.Tensor:
    """The log-sum-exp over the full vocabulary, computed from the shards as Megatron does."""
    _check_mode(mode)
    shards = [shard.float() for shard in shards]
    global_max = _global_max(shards)
    if mode == "native":
        partial_sums = [torch.exp(shard - global_max.unsqueeze(-1)).sum(dim=-1) for shard in shards]
        total = torch.stack(partial_sums).sum(dim=0)
    else:
        total = None
        for shard in shards:
            total = _sequential_sum(torch.exp(shard - global_max.unsqueeze(-1)), start=total)
    return global_max + torch.log(total)


def sharded_selected_logit(shards: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """The target token's logit: gathered on the owning rank, zeros elsewhere, summed."""
    vocab_size = sum(shard.shape[-1] for shard in shards)
    tp_size = len(shards)
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab_size):
        raise ValueError(f"target ids must lie in [0, {vocab_size}), got {int(targets.min())}..{int(targets.max())}")
    selected = torch.zeros(targets.shape, dtype=torch.float32)
    for rank, shard in enumerate(shards):
        start, end = vocab_range(rank, vocab_size, tp_size)
        owned = (targets >= start) & (targets < end)
        local = torch.where(owned, targets - start, torch.zeros_like(targets))
        picked = shard.float().gather(-1, local.unsqueeze(-1)).squeeze(-1)
        selected = selected + torch.where(owned, picked, torch.zeros_like(picked))
    return selected


def sharded_token_logprobs(shards: list[torch.Tensor], targets: torch.Tensor, mode: str = "native") -> torch.Tensor:
    return sharded_selected_logit(shards, targets) - sharded_logsumexp(shards, mode)


def full_logsumexp(logits: torch.Tensor, mode: str = "native") -> torch.Tensor:
    """The full-vocabulary reference: `torch.logsumexp`, or the strict sequential sum."""
    _check_mode(mode)
    logits = logits.float()
    if mode == "native":
        return torch.logsumexp(logits, dim=-1)
    global_max = logits.max(dim=-1).values
    return global_max + torch.log(_sequential_sum(torch.exp(logits - global_max.unsqueeze(-1))))


def full_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, mode: str = "native") -> torch.Tensor:
    selected = logits.float().gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return selected - full_logsumexp(logits, mode)
