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
BLOCK_V = 256


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
    tile_w = torch.zeros(BLOCK_V, width, dtype=torch.float32, device=hidden.device)
    cols = torch.arange(BLOCK_V, device=hidden.device)
    for c in range(n_chunks):
        lo, hi = local_bounds[c], local_bounds[c + 1]
        for r0 in range(0, padded, BLOCK_T):
            out[:, c, r0 : r0 + BLOCK_T] = _chunk_row_block(h[r0 : r0 + BLOCK_T], tgt[r0 : r0 + BLOCK_T], weight_shard, lo, hi, inv_temp, tile_w, cols)
    return out[0, :, :rows], out[1, :, :rows], out[2, :, :rows]


def _chunk_row_block(h, tgt, weight, lo, hi, inv_temp, tile_w, cols):
    m = torch.full((BLOCK_T,), float("-inf"), dtype=torch.float32, device=h.device)
    s = torch.zeros(BLOCK_T, dtype=torch.float32, device=h.device)
    z_t = torch.zeros(BLOCK_T, dtype=torch.float32, device=h.device)
    for v0 in range(lo, hi, BLOCK_V):
        n = min(BLOCK_V, hi - v0)
        tile_w.zero_()
        tile_w[:n] = weight[v0 : v0 + n].float()
        z = (h @ tile_w.T) * inv_temp  # [BLOCK_T, BLOCK_V] fp32
        z[:, n:] = float("-inf")  # columns past the chunk's end
        m_new = torch.maximum(m, z.amax(dim=1))
        s = s * torch.exp(m - m_new) + torch.exp(z - m_new[:, None]).sum(dim=1)
        m = m_new
        hit = ((cols[None, :] + v0) == tgt[:, None]) & (cols[None, :] < n)  # not the next chunk's columns
        z_t = z_t + torch.where(hit, z, torch.zeros((), dtype=z.dtype)).sum(dim=1)
    return torch.stack([m, s, z_t])
