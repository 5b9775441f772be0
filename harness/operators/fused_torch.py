"""The fused operator's partials in plain torch (CPU, or any device without Triton).

Same plan as the Triton kernel (fused_plan.py): per chunk, tiles of BLOCK_V columns from the chunk's
start, an online log-sum-exp in fp32. Rows go through in blocks of BLOCK_T, padded, so every GEMM and
every elementwise op has the same shape whatever T is: that is what keeps a row's bits independent
of the batch around it on CPU too (BLAS picks kernels by shape; vector loops have scalar tails).
Only one [BLOCK_T, BLOCK_V] tile of logits exists at a time.
"""

from __future__ import annotations

import torch

BLOCK_T = 64
BLOCK_V = 512


def torch_partials(hidden, weight_shard, targets, local_bounds, temperature):
    """Partials (m, s, z_t), each [len(local_bounds)-1, T] fp32, for the chunks of one shard.

    ``targets`` are shard-local ids (outside [0, shard width) means not on this shard).
    """
    rows, width = hidden.shape
    n_chunks = len(local_bounds) - 1
    padded = -(-rows // BLOCK_T) * BLOCK_T
    h = torch.zeros(padded, width, dtype=torch.float32, device=hidden.device)
    h[:rows] = hidden.float()  # bf16 -> fp32 is exact: the GEMM is fp32 on bf16 values
    tgt = torch.full((padded,), -1, dtype=torch.long, device=hidden.device)
    tgt[:rows] = targets
    inv_temp = torch.tensor(1.0 / temperature, dtype=torch.float32)
    out = torch.empty(3, n_chunks, padded, dtype=torch.float32, device=hidden.device)
    cols = torch.arange(BLOCK_V, device=hidden.device)
    for c in range(n_chunks):
        lo, hi = local_bounds[c], local_bounds[c + 1]
        m = torch.full((padded,), float("-inf"), dtype=torch.float32, device=hidden.device)
        s = torch.zeros(padded, dtype=torch.float32, device=hidden.device)
        z_t = torch.zeros(padded, dtype=torch.float32, device=hidden.device)
        for v0 in range(lo, hi, BLOCK_V):
            n = min(BLOCK_V, hi - v0)
            # One zero-padded fp32 tile, shared by every row block (same shape for every tile).
            tile_w = torch.nn.functional.pad(weight_shard[v0 : v0 + n].float(), (0, 0, 0, BLOCK_V - n))
            hit_cols = cols + v0
            for r0 in range(0, padded, BLOCK_T):
                rb = slice(r0, r0 + BLOCK_T)
                m[rb], s[rb], z_t[rb] = _fold_tile(h[rb], tgt[rb], tile_w, n, hit_cols, inv_temp, m[rb], s[rb], z_t[rb])
        out[0, c], out[1, c], out[2, c] = m, s, z_t
    return out[0, :, :rows], out[1, :, :rows], out[2, :, :rows]


def _fold_tile(h, tgt, tile_w, n, hit_cols, inv_temp, m, s, z_t):
    """Fold one [BLOCK_T, BLOCK_V] tile of scaled logits into a row block's (m, s, z_t)."""
    z = (h @ tile_w.T) * inv_temp  # [BLOCK_T, BLOCK_V] fp32
    z[:, n:] = float("-inf")  # columns past the chunk's end
    m_new = torch.maximum(m, z.amax(dim=1))
    s = s * torch.exp(m - m_new) + torch.exp(z - m_new[:, None]).sum(dim=1)
    hit = (hit_cols[None, :] == tgt[:, None]) & (hit_cols[None, :] < hit_cols[0] + n)  # not the next chunk's columns
    z_t = z_t + torch.where(hit, z, torch.zeros((), dtype=z.dtype)).sum(dim=1)
    return m_new, s, z_t


BACKWARD_SLICE = 512  # vocab columns per backward step (CPU): fixed, so the bits never depend on T


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
    cols = torch.arange(BACKWARD_SLICE, device=dev)
    for g0, g1 in zip(local_group_bounds[:-1], local_group_bounds[1:]):
        partial = torch.zeros(padded, width, dtype=torch.float32, device=dev)
        for v0 in range(g0, g1, BACKWARD_SLICE):
            n = min(BACKWARD_SLICE, g1 - v0)
            w_s = torch.nn.functional.pad(weight_shard[v0 : v0 + n].float(), (0, 0, 0, BACKWARD_SLICE - n))
            gw = torch.zeros(BACKWARD_SLICE, width, dtype=torch.float32, device=dev)
            for r0 in range(0, padded, BLOCK_T):
                rb = slice(r0, r0 + BLOCK_T)
                z = (h[rb] @ w_s.T) * inv_temp
                grad_z = torch.exp(z - lse_p[rb, None]) * -scale[rb, None]
                hit = (cols[None, :] + v0 == tgt[rb, None]) & (cols[None, :] < n)
                grad_z = torch.where(hit, grad_z + scale[rb, None], grad_z)
                grad_z[:, n:] = 0.0  # columns past the group's end
                partial[rb] += grad_z @ w_s
                gw += grad_z.T @ h[rb]
            grad_w[v0 : v0 + n] = gw[:n].to(grad_w.dtype)
        yield partial[:rows]
