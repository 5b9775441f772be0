"""Context-parallel zigzag slicing of one sample, and its inverse.

Mirrors VIME's `slice_with_cp` and `get_logits_and_tokens_offset_with_cp`
(backends/megatron_utils/cp_utils.py), the load-balanced causal-attention split Megatron uses:

* A row of `n` tokens is padded to `2 * cp * chunk` with `chunk = ceil(n / (2 * cp))`, cut into
  2*cp equal chunks, and rank r keeps chunks r and 2*cp - 1 - r (so every rank gets one early,
  cheap chunk and one late, expensive one).
* A response's log-probs (positions `[prompt_len - 1, total_len - 1)` of the row) are split the
  same way: each rank holds the part of that range that falls inside its two chunks; VIME's
  `slice_log_prob_with_cp` cuts rollout log-probs to match, and `all_gather_with_cp` puts the
  full response back together. Per-rank train dumps are CP-sliced, so reading them needs this.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "zigzag_chunk_size",
    "zigzag_rank_slice",
    "zigzag_split",
    "zigzag_merge",
    "cp_response_ranges",
    "slice_response_for_rank",
    "merge_response_from_ranks",
]


def _check_cp(cp_size: int, cp_rank: int | None = None) -> None:
    if cp_size < 1:
        raise ValueError(f"cp_size={cp_size}: expected --context-parallel-size >= 1")
    if cp_rank is not None and not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank={cp_rank}: expected 0 <= cp_rank < cp_size={cp_size}")


def zigzag_chunk_size(length: int, cp_size: int) -> int:
    _check_cp(cp_size)
    return (length + 2 * cp_size - 1) // (2 * cp_size)


def zigzag_rank_slice(row: torch.Tensor, cp_size: int, cp_rank: int, pad_value: float = 0) -> torch.Tensor:
    """What rank `cp_rank` holds of `row` (dim 0): chunks r and 2*cp-1-r after padding."""
    _check_cp(cp_size, cp_rank)
    if cp_size == 1:
        return row
    chunk = zigzag_chunk_size(row.shape[0], cp_size)
    pad = 2 * cp_size * chunk - row.shape[0]
    padded = F.pad(row, (0, 0) * (row.dim() - 1) + (0, pad), value=pad_value)
    late = 2 * cp_size - 1 - cp_rank
    return torch.cat([padded[cp_rank * chunk : (cp_rank + 1) * chunk], padded[late * chunk : (late + 1) * chunk]])


def zigzag_split(row: torch.Tensor, cp_size: int, pad_value: float = 0) -> list[torch.Tensor]:
    """Every rank's slice, rank order."""
    return [zigzag_rank_slice(row, cp_size, rank, pad_value) for rank in range(cp_size)]


def zigzag_merge(per_rank: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """Inverse of `zigzag_split`: the original row of `length` entries (padding dropped)."""
    cp_size = len(per_rank)
    _check_cp(cp_size)
    if cp_size == 1:
        return per_rank[0][:length]
    chunk = zigzag_chunk_size(length, cp_size)
    chunks: list[torch.Tensor | None] = [None] * (2 * cp_size)
    for rank, part in enumerate(per_rank):
        if part.shape[0] != 2 * chunk:
            raise ValueError(
                f"zigzag_merge: rank {rank} holds {part.shape[0]} entries, expected 2 x {chunk} for a row of {length} split over cp_size={cp_size}"
            )
        chunks[rank], chunks[2 * cp_size - 1 - rank] = part[:chunk], part[chunk:]
    return torch.cat(chunks)[:length]


def cp_response_ranges(total_len: int, response_len: int, cp_size: int, cp_rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Row positions [start, end) of the response log-probs that rank `cp_rank` computes.

    Two ranges, one per chunk; an empty one is (0, 0), as VIME writes it.
    """
    _check_cp(cp_size, cp_rank)
    prompt_len = total_len - response_len
    if prompt_len < 1 or response_len < 0:
        raise ValueError(f"total_len={total_len}, response_len={response_len}: need a non-empty prompt")
    chunk = zigzag_chunk_size(total_len, cp_size)
    late = 2 * cp_size - 1 - cp_rank
    ranges = []
    for index in (cp_rank, late):
        start = max(index * chunk, prompt_len - 1)
        end = min((index + 1) * chunk, total_len - 1)
        ranges.append((start, end) if start < end else (0, 0))
    return ranges[0], ranges[1]


def slice_response_for_rank(values: torch.Tensor, total_len: int, response_len: int, cp_size: int, cp_rank: int) -> torch.Tensor:
    """The part of a response-length tensor (e.g. rollout log-probs) that rank `cp_rank` holds."""
    if values.shape[0] != response_len:
        raise ValueError(f"values cover {values.shape[0]} tokens, expected response_len={response_len}")
    offset = total_len - response_len - 1
    parts = [values[s - offset : e - offset] for s, e in cp_response_ranges(total_len, response_len, cp_size, cp_rank) if e > s]
    return torch.cat(parts) if parts else values[:0]


def merge_response_from_ranks(per_rank: Sequence[torch.Tensor], total_len: int, response_len: int) -> torch.Tensor:
    """Inverse of `slice_response_for_rank` over all ranks: the full response-length tensor."""
    cp_size = len(per_rank)
    offset = total_len - response_len - 1
    pieces: list[tuple[int, torch.Tensor]] = []
    for rank, part in enumerate(per_rank):
        cursor = 0
        for start, end in cp_response_ranges(total_len, response_len, cp_size, rank):
            if end > start:
                pieces.append((start - offset, part[cursor : cursor + end - start]))
                cursor += end - start
        if cursor != part.shape[0]:
            raise ValueError(
                f"merge_response_from_ranks: rank {rank} holds {part.shape[0]} values, its ranges "
                f"cover {cursor}; the per-rank tensors do not match total_len={total_len}, "
                f"response_len={response_len}, cp_size={cp_size}"
            )
    pieces.sort(key=lambda item: item[0])
    merged = torch.cat([piece for _, piece in pieces]) if pieces else per_rank[0][:0]
    if merged.shape[0] != response_len:
        raise ValueError(f"merged {merged.shape[0]} values, expected response_len={response_len}")
    return merged
