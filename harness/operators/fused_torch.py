"""The fused operator's partials in plain torch (CPU, or any device without Triton).

Same plan as the Triton kernel (fused_plan.py): per chunk, tiles of up to BLOCK_V columns from the
chunk's start, an online log-sum-exp in fp32. Rows go through in blocks of BLOCK_T, padded, so every GEMM and
every elementwise op has the same shape whatever T is: that is what keeps a row's bits independent
of the batch around it on CPU too (BLAS picks kernels by shape; vector loops have scalar tails).
Only one [BLOCK_T, CHUNKS_PER_GEMM x tile] block of logits exists at a time.
"""

from __future__ import annotations

import torch

BLOCK_T = 64
BLOCK_V = 512
TILE_ALIGN = 16  # a narrow vocabulary's tiles are cut to its chunk width, rounded up to this


def tile_width(local_bounds, cap: int) -> int:
    """Columns per tile for a shard's chunks (or groups): ``cap``, or less when every chunk is narrower.

    A chunk is floor(V/n) or ceil(V/n) columns wide; ceil(V/n) equals ceil(shard width / the shard's
    chunk count) on every TP shard (V and n are multiples of TP), so every rank, and TP=1, cuts the
    same tiles: one GEMM shape, whatever T and TP are. At V=151936 this is ``cap`` (the plan as it
    was); at the embedded model's V=512 it is 16 forward columns instead of 512, most of which were
    padding that every row block multiplied.
    """
    n = len(local_bounds) - 1
    widest = -(-(local_bounds[-1] - local_bounds[0]) // n)
    return min(cap, -(-widest // TILE_ALIGN) * TILE_ALIGN)


CHUNKS_PER_GEMM = 15  # N_CHUNKS / 8: every TP shard (TP 1, 2, 4, 8) holds a whole number of these


def torch_partials(hidden, weight_shard, targets, local_bounds, temperature):
    """Partials (m, s, z_t), each [len(local_bounds)-1, T] fp32, for the chunks of one shard.

    ``targets`` are shard-local ids (outside [0, shard width) means not on this shard).
    Chunks go through CHUNKS_PER_GEMM at a time: their k-th tiles, each zero-padded to the same width,
    side by side in one GEMM per row block, then each chunk's columns are folded on their own. The
    GEMM's shape depends on neither T nor TP, and a chunk's columns sit at the same place in it on
    every rank, so the bits do not either; one GEMM of 15 chunks instead of 15 keeps Python's loop
    short when chunks are narrow (the embedded model's 4-5 columns).
    """
    rows, width = hidden.shape
    dev = hidden.device
    n_chunks = len(local_bounds) - 1
    assert n_chunks % CHUNKS_PER_GEMM == 0, f"{n_chunks} chunks on a shard, not a multiple of {CHUNKS_PER_GEMM}"
    padded = -(-rows // BLOCK_T) * BLOCK_T
    h = torch.zeros(padded, width, dtype=torch.float32, device=dev)
    h[:rows] = hidden.float()  # bf16 -> fp32 is exact: the GEMM is fp32 on bf16 values
    tgt = torch.full((padded,), -1, dtype=torch.long, device=dev)
    tgt[:rows] = targets
    inv_temp = torch.tensor(1.0 / temperature, dtype=torch.float32)
    out = torch.empty(3, n_chunks, padded, dtype=torch.float32, device=dev)
    block_v = tile_width(local_bounds, BLOCK_V)
    widest = max(hi - lo for lo, hi in zip(local_bounds[:-1], local_bounds[1:]))
    n_tiles = -(-widest // block_v)  # a narrower chunk's last tiles are all masked: they add exactly 0
    offsets = torch.arange(block_v, device=dev)
    for c0 in range(0, n_chunks, CHUNKS_PER_GEMM):
        starts = torch.tensor(local_bounds[c0 : c0 + CHUNKS_PER_GEMM], device=dev)
        ends = torch.tensor(local_bounds[c0 + 1 : c0 + CHUNKS_PER_GEMM + 1], device=dev)
        m = torch.full((padded, CHUNKS_PER_GEMM), float("-inf"), dtype=torch.float32, device=dev)
        s = torch.zeros(padded, CHUNKS_PER_GEMM, dtype=torch.float32, device=dev)
        z_t = torch.zeros(padded, CHUNKS_PER_GEMM, dtype=torch.float32, device=dev)
        for k in range(n_tiles):
            col = starts[:, None] + k * block_v + offsets[None, :]  # [chunks, block_v] shard-local ids
            valid = col < ends[:, None]  # columns past a chunk's end (or its last tile's padding)
            tile_w = torch.where(valid[..., None], weight_shard[col.clamp(max=weight_shard.shape[0] - 1)].float(), 0.0)
            tile_w = tile_w.reshape(CHUNKS_PER_GEMM * block_v, width)
            for r0 in range(0, padded, BLOCK_T):
                rb = slice(r0, r0 + BLOCK_T)
                m[rb], s[rb], z_t[rb] = _fold_tiles(h[rb], tgt[rb], tile_w, col, valid, inv_temp, m[rb], s[rb], z_t[rb])
        out[:, c0 : c0 + CHUNKS_PER_GEMM] = torch.stack([m.T, s.T, z_t.T])
    return out[0, :, :rows], out[1, :, :rows], out[2, :, :rows]


def _fold_tiles(h, tgt, tile_w, col, valid, inv_temp, m, s, z_t):
    """Fold one tile per chunk ([BLOCK_T, chunks, block_v] scaled logits) into a row block's (m, s, z_t)."""
    z = (h @ tile_w.T).view(h.shape[0], *col.shape) * inv_temp
    z = torch.where(valid, z, float("-inf"))
    m_new = torch.maximum(m, z.amax(dim=2))
    # A chunk with no columns yet (V < N_CHUNKS leaves some empty) keeps m = -inf and s = 0; shifting
    # by 0 there instead of -inf avoids exp(-inf - -inf) = nan, and changes nothing where m_new is finite.
    shift = torch.where(torch.isneginf(m_new), torch.zeros((), dtype=m_new.dtype), m_new)
    s = s * torch.exp(m - shift) + torch.exp(z - shift[..., None]).sum(dim=2)
    hit = (col[None] == tgt[:, None, None]) & valid
    z_t = z_t + torch.where(hit, z, torch.zeros((), dtype=z.dtype)).sum(dim=2)
    return m_new, s, z_t


BACKWARD_SLICE = 512  # vocab columns per backward step (CPU): fixed, so the bits never depend on T


def _padded_operands(hidden, targets, lse, temperature, grad_out):
    """hidden (fp32), targets, lse and grad_out / T padded to whole BLOCK_T row blocks (pads: zeros, target -1)."""
    rows, width = hidden.shape
    dev = hidden.device
    padded = -(-rows // BLOCK_T) * BLOCK_T
    h = torch.zeros(padded, width, dtype=torch.float32, device=dev)
    h[:rows] = hidden.float()
    tgt = torch.full((padded,), -1, dtype=torch.long, device=dev)
    tgt[:rows] = targets
    lse_p = torch.zeros(padded, dtype=torch.float32, device=dev)
    lse_p[:rows] = lse
    inv_temp = torch.tensor(1.0 / temperature, dtype=torch.float32)
    scale = torch.zeros(padded, dtype=torch.float32, device=dev)
    scale[:rows] = grad_out.float() * inv_temp  # d logp / d logit = (onehot - softmax) / T
    return h, tgt, lse_p, scale, inv_temp


def _slices(weight_shard, local_group_bounds):
    """(first column, columns, the slice's fp32 weight rows padded to the slice width) per backward slice, group by group."""
    slice_w = tile_width(local_group_bounds, BACKWARD_SLICE)
    for g0, g1 in zip(local_group_bounds[:-1], local_group_bounds[1:]):
        for v0 in range(g0, g1, slice_w):
            n = min(slice_w, g1 - v0)
            yield g0, v0, n, torch.nn.functional.pad(weight_shard[v0 : v0 + n].float(), (0, 0, 0, slice_w - n))


def _grad_logits(h_rb, tgt_rb, lse_rb, scale_rb, w_s, v0, n, inv_temp):
    """One row block's fp32 grad_logits over one slice: (onehot - softmax) * grad_out / T, zeros past the slice."""
    cols = torch.arange(w_s.shape[0], device=h_rb.device)
    z = (h_rb @ w_s.T) * inv_temp
    grad_z = torch.exp(z - lse_rb[:, None]) * -scale_rb[:, None]
    hit = (cols[None, :] + v0 == tgt_rb[:, None]) & (cols[None, :] < n)
    grad_z = torch.where(hit, grad_z + scale_rb[:, None], grad_z)
    grad_z[:, n:] = 0.0  # columns past the group's end
    return grad_z


def torch_backward_groups(hidden, weight_shard, targets, lse, temperature, grad_out, local_group_bounds, grad_w):
    """Yield each local group's grad_hidden partial ([T, H] fp32), writing grad_weight rows as it goes.

    Same plan as the Triton backward (fused_plan.py): per group, slices of BACKWARD_SLICE columns from
    the group's start; per slice, every row block's fp32 logits are recomputed, turned into
    grad_logits = (onehot - softmax) * grad_out / T, multiplied into the group's grad_hidden partial
    (a [BLOCK_T, slice] x [slice, H] product per row block) and into the slice's grad_weight rows
    (row blocks added in order). Rows are padded to blocks of BLOCK_T and slices to BACKWARD_SLICE
    columns, so every product has one shape whatever T is: a row's grad_hidden never depends on the
    other rows, and grad_weight is reduced over fixed row blocks in a fixed order.
    ``grad_w`` [shard V, H] receives the weight gradient in its own dtype.
    """
    rows, width = hidden.shape
    h, tgt, lse_p, scale, inv_temp = _padded_operands(hidden, targets, lse, temperature, grad_out)
    partial = None
    for g0, v0, n, w_s in _slices(weight_shard, local_group_bounds):
        if v0 == g0:
            if partial is not None:
                yield partial[:rows]
            partial = torch.zeros(h.shape[0], width, dtype=torch.float32, device=h.device)
        gw = torch.zeros(w_s.shape[0], width, dtype=torch.float32, device=h.device)
        for r0 in range(0, h.shape[0], BLOCK_T):
            rb = slice(r0, r0 + BLOCK_T)
            grad_z = _grad_logits(h[rb], tgt[rb], lse_p[rb], scale[rb], w_s, v0, n, inv_temp)
            partial[rb] += grad_z @ w_s
            gw += grad_z.T @ h[rb]
        grad_w[v0 : v0 + n] = gw[:n].to(grad_w.dtype)
    if partial is not None:
        yield partial[:rows]


def torch_backward_lean(hidden, shards, lse, temperature, grad_out, grad_h, row_chunk: int) -> None:
    """The lean plan (fused_plan.py) on the torch path, the twin of fused_triton.triton_backward_lean.

    ``shards``: (weight_shard, shard-local targets, local group bounds, grad_w rows) per TP rank in rank
    order. grad_hidden per chunk of ``row_chunk`` rows (a multiple of BLOCK_T) from row 0: every rank's
    groups in order, each group's partial from zero, added to the chunk's running sum; per row the
    additions of torch_backward_groups + fused_plan.sum_group_partials. grad_weight in a pass of its own
    over every row block in order, as torch_backward_groups reduces it (grad_logits computed again).
    """
    if row_chunk <= 0 or row_chunk % BLOCK_T:
        raise ValueError(f"lean backward: row_chunk={row_chunk} must be a positive multiple of BLOCK_T={BLOCK_T}")
    rows, width = hidden.shape
    h, tgt, lse_p, scale, inv_temp = _padded_operands(hidden, shards[0][1], lse, temperature, grad_out)
    padded = h.shape[0]
    targets = []
    for _, t, _, _ in shards:
        tp = torch.full((padded,), -1, dtype=torch.long, device=h.device)
        tp[:rows] = t
        targets.append(tp)
    for r0 in range(0, padded, row_chunk):
        r1 = min(padded, r0 + row_chunk)
        total = None
        for (weight_shard, _, bounds, _), tgt in zip(shards, targets):
            partial = None
            for g0, v0, n, w_s in _slices(weight_shard, bounds):
                if v0 == g0:
                    if partial is not None:
                        total = partial if total is None else total.add_(partial)
                    partial = torch.zeros(r1 - r0, width, dtype=torch.float32, device=h.device)
                for b0 in range(r0, r1, BLOCK_T):
                    rb = slice(b0, b0 + BLOCK_T)
                    partial[b0 - r0 : b0 - r0 + BLOCK_T] += _grad_logits(h[rb], tgt[rb], lse_p[rb], scale[rb], w_s, v0, n, inv_temp) @ w_s
            total = partial if total is None else total.add_(partial)
        n_rows = max(0, min(rows, r1) - r0)
        grad_h[r0 : r0 + n_rows] = total[:n_rows].to(grad_h.dtype)
    for (weight_shard, _, bounds, grad_w), tgt in zip(shards, targets):
        for _, v0, n, w_s in _slices(weight_shard, bounds):
            gw = torch.zeros(w_s.shape[0], width, dtype=torch.float32, device=h.device)
            for b0 in range(0, padded, BLOCK_T):
                rb = slice(b0, b0 + BLOCK_T)
                gw += _grad_logits(h[rb], tgt[rb], lse_p[rb], scale[rb], w_s, v0, n, inv_temp).T @ h[rb]
            grad_w[v0 : v0 + n] = gw[:n].to(grad_w.dtype)
