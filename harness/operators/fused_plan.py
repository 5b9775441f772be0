"""The fixed reduction plan that makes the fused operator batch- and TP-invariant, forward and backward.

Forward. The vocabulary is always cut into ``N_CHUNKS`` = 120 chunks at ``(c * V) // 120``. Each
chunk is reduced on its own, tile by tile from the chunk's first column, into a partial (m, s, z_t):
the running max of the scaled logits, the sum of exp(logit - m), and the target's scaled logit if the
target lies in the chunk (else 0). The partials are merged in chunk order, always by the same
elementwise sequence (:func:`merge_partials`). 120 is a multiple of 8 (the largest TP size), so with
TP = 1, 2, 4 or 8 and V divisible by TP, rank r's shard is exactly chunks [r*120/TP, (r+1)*120/TP):
every rank computes the partials the unsplit operator computes, the ranks all-gather partials, and
everyone merges the same 120 values in the same order. Why 120 and not 8: the GPU grid is (row
blocks x chunks); 8 chunks gave 16 programs at T=256 on a 132-SM card. 120 chunks of V=151936 are
1266-1267 columns, 5 tiles of 256 with 1% masked, and (row blocks x 120) programs fill 90-98% of the
card's waves at every T from 256 to 8192 (docs/operators.md). The plan never looks at T.

Backward. grad_hidden is a sum over the whole vocabulary, so its order must be fixed too. The
vocabulary is cut into ``N_GROUPS`` = 8 groups at ``(g * V) // 8`` (a TP=8 shard each); each group's
contribution is accumulated on its own from zero, slice by slice from the group's start, and the 8
group partials are added left to right (:func:`sum_group_partials`). A TP rank computes its groups'
partials; after an all-gather every rank adds the same 8 tensors in the same order. grad_weight's
rows belong to one vocab id each, so a shard's rows are computed exactly as the unsplit operator
computes them.

Two backward plans execute this order (``BACKWARD_PLANS``); both give the same bits. ``fast`` (the
default) runs each vocab slice once over all T rows: grad_logits, then both products from it; the
group partial is a [T, H] fp32 tensor beside the [T, H] total. ``lean`` bounds the memory: grad_hidden
in chunks of ``LEAN_ROW_CHUNK`` rows from row 0 (fixed, never chosen from T), each chunk running every
group in order with a [chunk, H] partial beside a [chunk, H] sum, which is the same per-row sequence of
additions; grad_weight, whose sum over T spans the chunks, in a second pass that recomputes
grad_logits over all T rows per slice and reduces them as the fast plan does (one more GEMM-sized
product instead of an fp32 [V, H] accumulator; docs/operators.md). One pass when T fits one chunk.
"""

from __future__ import annotations

import functools

import torch

N_CHUNKS = 120
N_GROUPS = 8
MAX_TP = 8
LEAN_ROW_CHUNK = 2048  # the lean backward's rows per grad_hidden chunk: a multiple of every row block (64 CPU, 128 GPU)
BACKWARD_PLANS = ("fast", "lean")
MERGE_ROW_ALIGN = 64  # CPU: pad rows so every elementwise op runs its vector loop, never the scalar tail


def _bounds(vocab: int, parts: int) -> list[int]:
    return [(c * vocab) // parts for c in range(parts + 1)]


def chunk_bounds(vocab: int) -> list[int]:
    """Global forward chunk boundaries, N_CHUNKS + 1 of them."""
    return _bounds(vocab, N_CHUNKS)


def group_bounds(vocab: int) -> list[int]:
    """Global backward group boundaries, N_GROUPS + 1 of them."""
    return _bounds(vocab, N_GROUPS)


@functools.lru_cache(maxsize=256)
def _shard_bounds(vocab: int, tp_size: int, rank: int, parts: int) -> tuple[int, tuple[int, ...]]:
    # cached: rebuilding 121 bounds cost 24 us of host time per call, 2% of a 1 ms forward at T=1024
    if MAX_TP % tp_size or vocab % tp_size:
        raise ValueError(f"tp_size={tp_size} must divide {MAX_TP} and V={vocab}")
    per = parts // tp_size
    bounds = _bounds(vocab, parts)[rank * per : (rank + 1) * per + 1]
    start = rank * (vocab // tp_size)
    assert bounds[0] == start, "shard boundary must coincide with a chunk boundary"
    return start, tuple(b - start for b in bounds)


def shard_chunk_bounds(vocab: int, tp_size: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """(vocab_start of the shard, forward chunk bounds local to the shard) for one TP rank."""
    return _shard_bounds(vocab, tp_size, rank, N_CHUNKS)


def shard_group_bounds(vocab: int, tp_size: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """(vocab_start of the shard, backward group bounds local to the shard) for one TP rank."""
    return _shard_bounds(vocab, tp_size, rank, N_GROUPS)


def merge_partials(m: torch.Tensor, s: torch.Tensor, z_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge [N_CHUNKS, T] partials in chunk order -> (selected log-prob [T], log-sum-exp [T])."""
    assert m.shape[0] == N_CHUNKS, f"expected {N_CHUNKS} chunk partials, got {m.shape[0]}"
    if m.is_cuda:
        from harness.operators.fused_triton import triton_merge

        return triton_merge(m, s, z_t)
    rows = m.shape[1]
    pad = (-rows) % MERGE_ROW_ALIGN
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


def sum_group_partials(partials) -> torch.Tensor:
    """grad_hidden from the N_GROUPS group partials ([T, H] fp32 each), added left to right."""
    partials = list(partials)
    assert len(partials) == N_GROUPS, f"expected {N_GROUPS} group partials, got {len(partials)}"
    total = partials[0].clone()
    for p in partials[1:]:
        total += p  # one IEEE add per element: the same bits on any device, any shape
    return total
