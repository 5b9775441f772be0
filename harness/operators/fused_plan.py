"""The fixed reduction plan that makes the fused operator batch- and TP-invariant.

The vocabulary is always cut into ``N_CHUNKS`` = 8 chunks at ``(c * V) // 8`` (8 is the largest TP
size supported). Each chunk is reduced on its own, tile by tile from the chunk's first column, into
a partial (m, s, z_t): the running max of the scaled logits, the sum of exp(logit - m), and the
target's scaled logit if the target lies in the chunk (else 0). The 8 partials are then merged in
chunk order, always by the same elementwise sequence (:func:`merge_partials`).

With TP = 1, 2, 4 or 8 and V divisible by TP, rank r's shard is exactly chunks
[r*8/TP, (r+1)*8/TP): every rank computes the same partials the unsplit operator computes, the
ranks exchange partials (an all-gather, not an all-reduce), and everyone merges the same 8 values
in the same order. So the result is bitwise the same for every TP split. Batch invariance comes from
the kernel: a row's partials depend only on that row (fixed tile sizes, no split over rows or K that
depends on T).
"""

from __future__ import annotations

import torch

N_CHUNKS = 8
MERGE_ROW_ALIGN = 64  # CPU: pad rows so every elementwise op runs its vector loop, never the scalar tail


def chunk_bounds(vocab: int) -> list[int]:
    """Global chunk boundaries, N_CHUNKS + 1 of them."""
    return [(c * vocab) // N_CHUNKS for c in range(N_CHUNKS + 1)]


def shard_chunk_bounds(vocab: int, tp_size: int, rank: int) -> tuple[int, list[int]]:
    """(vocab_start of the shard, chunk bounds local to the shard) for one TP rank."""
    if N_CHUNKS % tp_size or vocab % tp_size:
        raise ValueError(f"tp_size={tp_size} must divide {N_CHUNKS} and V={vocab}")
    per = N_CHUNKS // tp_size
    bounds = chunk_bounds(vocab)[rank * per : (rank + 1) * per + 1]
    start = rank * (vocab // tp_size)
    assert bounds[0] == start, "shard boundary must coincide with a chunk boundary"
    return start, [b - start for b in bounds]


def merge_partials(m: torch.Tensor, s: torch.Tensor, z_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge [N_CHUNKS, T] partials in chunk order -> (selected log-prob [T], log-sum-exp [T])."""
    assert m.shape[0] == N_CHUNKS, f"expected {N_CHUNKS} chunk partials, got {m.shape[0]}"
    rows = m.shape[1]
    pad = (-rows) % MERGE_ROW_ALIGN if m.device.type == "cpu" else 0
    if pad:
        m, s, z_t = (torch.nn.functional.pad(x, (0, pad)) for x in (m, s, z_t))
    big = m[0]
    for c in range(1, N_CHUNKS):
        big = torch.maximum(big, m[c])
    total = s[0] * torch.exp(m[0] - big)
    target = z_t[0]
    for c in range(1, N_CHUNKS):
        total = total + s[c] * torch.exp(m[c] - big)
        target = target + z_t[c]  # exactly one chunk holds the target; the others add 0
    lse = big + torch.log(total)
    return (target - lse)[:rows], lse[:rows]
