"""The fused operator's keep plan (GPU): the forward keeps its softmax terms, the backward skips the recompute.

The fast and lean plans recompute the logits in the backward (a fourth GEMM-sized product). The keep plan
does three: the forward's epilogue already computes, per [128-row, 256-column] tile, ``e = exp2(acc * log2(e)/T
- m2)`` against the row's running max ``m2`` after that tile (e <= 1); it stores ``e * 2^15`` in fp16 into a
[T, V] buffer (a normal fp16 number down to e = 1.9e-9) and ``m2`` per (row, tile) in fp32. The partials and
their merge are the device-TMA base-2 kernel's, unchanged. The backward then needs no GEMM for grad_logits:

1. ``_keep_convert_kernel`` turns the buffer in place into the fast plan's grad_logits,
   ``G = (onehot - p) * m * 2^15`` (m the mantissa of grad_out / T per row, fused_triton._row_scales), with
   ``p = e * 2^(m2 - lse2)``; the target's entry is ``(1 - exp(logp)) * m * 2^15`` from the fp32 log-prob, not
   from the fp16 term (1 - p of a confident row would lose its bits to the fp16 rounding of p). Memory bound:
   one read and one write of the buffer.
2. grad_weight = G^T @ (hidden's fp16 copy, rows times powers of two) over the whole shard in one launch,
   and grad_hidden = G @ W per group of V/8 columns, the 8 group partials added left to right: the fast plan's
   product kernels (fused_triton._grad_weight_kernel, _grad_hidden_kernel) and its reduction order.

G is rounded twice (the fp16 term, then the fp16 grad_logits), where the fast plan rounds it once, so the
keep plan's gradients are not the fast plan's bits; each plan is batch- and TP-invariant on its own (a row's
terms depend only on that row; tiles start at each chunk's first column, so a TP shard stores what the
unsplit operator stores for its columns; groups and their order are the fast plan's). Extra memory: the
[T, V] fp16 buffer (2.3 GiB at T=8192, V=151936) and the per-tile maxima (N_CHUNKS x tiles per chunk x T
fp32, 19 MiB there) from the forward to the backward; in the backward the [T, H] fp32 sum (each group's launch
adds onto it: no partial with GROUP_SUM_IN_KERNEL), hidden's fp16 copy and one group of the weight in fp16 (74 MiB).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from harness.operators.fused_triton import (
    BACKWARD_CONFIG,
    HOPPER_CONFIG,
    _bounds_tensor,
    _grad_hidden_kernel,
    _grad_weight_kernel,
    _row_scales,
    _tile_acc_tma,
    _weight_operand,
    ensure_allocator,
)

KEEP_EXP = 15  # the stored term is e * 2**KEEP_EXP: e <= 1 stays below fp16's max, e >= 1.9e-9 stays a normal number
# How the two kernels that touch the whole [T, V] buffer are launched and compiled; no bit depends on any of these
# (tools/probe_keep_breakdown.py checks it). Chosen on the H100 (reports/bench/h100-keep-variants.json, then
# h100-keep-aligned-variants.json, 2026-12-06):
# FORWARD_FLATTEN: the forward's tile loop flattened with its K loop, as in the fast plan's forward: 8.7-9.0 ms
# against 10.2-10.4 unflattened, though ptxas reports 204 bytes of spills flattened and none unflattened.
FORWARD_FLATTEN = True
# CONVERT_BLOCK_T, CONVERT_WARPS: the in-place conversion's rows per program and warps. In aligned windows
# (CONVERT_ALIGNED) 8 rows and 4 warps: 2.14 ms, 16 rows 2.49, 32 and 64 rows with 8 warps 4.10-4.12; before them, with
# 2-byte accesses, 16 rows took 3.35-3.37 ms and 8 rows 4.65-4.71.
CONVERT_BLOCK_T = 8
CONVERT_WARPS = 4
# CONVERT_CHUNK_FIRST: the conversion runs every chunk of a row block before the next row block, so the programs
# running together own a contiguous band of rows.
CONVERT_CHUNK_FIRST = True
# FORWARD_GROUP_T: the forward runs GROUP_T row blocks over the chunks, chunk by chunk, before the next row blocks
# (0: every row block of a chunk before the next chunk, each weight chunk read once). At the spilling kernels no order
# moved either kernel (reports/bench/h100-keep-launch-order.json).
FORWARD_GROUP_T = 0
# CONVERT_ALIGNED: the conversion walks each chunk in 16-byte-aligned windows of BLOCK_V columns (a column's tile max
# chosen per element: a window meets at most two of the forward's tiles), with 2-byte accesses only for the fewer than
# 8 columns at either end. A chunk starts at (c * V) // 120, rarely aligned, and windows at the forward's tile origins
# compile to one 2-byte load and store per element (cuobjdump -sass: LDG.E.U16; aligned: LDG.E.128): 15.2 ms against
# 2.5 at 16 rows in one call. (TMA at the tile origins is no way out: a tensor copy's innermost coordinate must be
# 16-byte aligned.) The forward still stores its tiles 2 bytes at a time, from registers at the same origins.
CONVERT_ALIGNED = True
# GROUP_SUM_IN_KERNEL: each group's grad_hidden launch adds its scaled sum onto the earlier groups' (the same fp32
# adds, left to right) instead of writing a partial that a separate elementwise launch adds (7 launches, 0.45 ms).
GROUP_SUM_IN_KERNEL = True
# WEIGHT_COPY_TRITON: each group's fp16 weight copy by one vectorised Triton launch (torch's bf16 -> fp16 copy_ runs
# its unrolled, non-vectorised cast kernel), read through a descriptor clipped at the group's rows (TMA fills the K
# loop's rows past the group with zeros, so no zeroing launch): 0.41 ms for the 8 groups against 0.93.
WEIGHT_COPY_TRITON = True
# Launch the products with the H tiles varying fastest: the programs that run together then read the same grad_logits
# columns (grad_weight) or rows (grad_hidden) of the [T, V] buffer once, where vocab-tile-first launches read every
# strip once per H tile. No bit depends on it.
H_FIRST = True


@triton.jit
def _launch_order(pid, n_row_blocks, n_chunks, GROUP_T: tl.constexpr):
    """(row block, chunk) of a 1-D program id. GROUP_T = 0: row blocks fastest, one chunk after another; GROUP_T = 1:
    chunks fastest, one row block after another; else bands of GROUP_T row blocks, row block fastest within the
    band, chunk by chunk (the band's hidden rows stay in L2 while it sweeps the weight)."""
    if GROUP_T == 0:
        row_block = pid % n_row_blocks
        chunk = pid // n_row_blocks
    else:
        per = GROUP_T * n_chunks
        first = (pid // per) * GROUP_T
        size = tl.minimum(n_row_blocks - first, GROUP_T)
        row_block = first + (pid % per) % size
        chunk = (pid % per) // size
    return row_block, chunk


@triton.jit(do_not_specialize=["T", "V", "n_chunks"])
def _partials_keep_kernel(
    h_ptr,
    w_ptr,
    tgt_ptr,
    bounds_ptr,
    out_ptr,
    y_ptr,
    ymax_ptr,
    T,
    V,
    H,
    inv_temp,
    n_chunks,
    MAX_TILES: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_T: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    """fused_triton._partials_kernel_dtma's base-2 loop (same loads, same tl.dot sequence, same partials) that
    also stores each tile's exp2 terms times 2**15 in fp16 (columns of its own chunk only: a chunk's last tile
    overlaps the next chunk) and the running max after each tile."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[T, H], strides=[H, 1], block_shape=[BLOCK_T, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[V, H], strides=[H, 1], block_shape=[BLOCK_V, BLOCK_K])
    row_block, chunk = _launch_order(tl.program_id(0), tl.cdiv(T, BLOCK_T), n_chunks, GROUP_T)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    row0 = row_block * BLOCK_T
    rows = row0 + tl.arange(0, BLOCK_T)
    row_ok = rows < T
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    tgt = tl.where((tgt >= lo) & (tgt < hi), tgt, -1).to(tl.int32)
    vs = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_T], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_T], tl.float32)
    z_t = tl.zeros([BLOCK_T], tl.float32)
    k_steps = H // BLOCK_K
    n_tiles = tl.cdiv(hi - lo, BLOCK_V)
    scale2 = inv_temp * 1.4426950408889634
    # One 64-bit base per program, 32-bit offsets within its rows (BLOCK_T * V < 2**31): a 64-bit pointer per
    # element of the tile cost the registers the accumulator needs (ptxas -v, sm_90a: spills).
    y_base = y_ptr + row0.to(tl.int64) * V
    y_off = tl.arange(0, BLOCK_T)[:, None] * V
    for tile in tl.range(0, n_tiles, flatten=FLATTEN):
        v0 = lo + tile * BLOCK_V
        acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
        cols = v0 + vs
        a = tl.where(cols[None, :] < hi, acc, float("-inf"))
        m_new = tl.maximum(m, tl.max(a, axis=1) * scale2)
        z_t = z_t + tl.sum(tl.where(cols[None, :] == tgt[:, None], a, 0.0), axis=1)
        e = tl.exp2(a * scale2 - m_new[:, None])
        s = s * tl.exp2(m - m_new) + tl.sum(e, axis=1)
        m = m_new
        # Only the chunk's own columns; rows past T are the buffer's padding (keep_partials), so no row mask.
        tl.store(y_base + (y_off + cols[None, :]), (e * 32768.0).to(tl.float16), mask=cols[None, :] < hi)
        tl.store(ymax_ptr + (chunk * MAX_TILES + tile) * T + rows, m_new, mask=row_ok)
    m = m * 0.6931471805599453
    z_t = z_t * inv_temp
    plane = n_chunks * T
    base = out_ptr + chunk * T + rows
    tl.store(base, m, mask=row_ok)
    tl.store(base + plane, s, mask=row_ok)
    tl.store(base + 2 * plane, z_t, mask=row_ok)


@triton.jit
def _grad_terms(y, at_target, mx, lse2, gs, g_target):
    """The kept terms (fp16 e * 2**15, here fp32) -> fp16 grad_logits (onehot - p) * g_scale, p = e * 2**(mx - lse2);
    ``mx`` the max of each element's own forward tile (per row, or per element)."""
    c = tl.exp2(mx - lse2) * gs * 3.0517578125e-05  # 2**-15
    return tl.where(at_target, g_target, -(y * c)).to(tl.float16)


@triton.jit(do_not_specialize=["T", "n_chunks"])
def _keep_convert_kernel(
    y_ptr,
    ymax_ptr,
    bounds_ptr,
    tgt_ptr,
    lse_ptr,
    logp_ptr,
    gscale_ptr,
    T,
    V,
    n_chunks,
    MAX_TILES: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    CHUNK_FIRST: tl.constexpr,
    ALIGNED: tl.constexpr = False,
):
    """In place: the kept term e * 2**15 -> (onehot - p) * g_scale, p = e * 2**(m2 - lse2), for one row block
    and one forward chunk (each column meets its own forward tile's max). V is left to Triton's divisibility
    specialisation: with V a multiple of 16 every row of the buffer starts 16-byte aligned."""
    row_block, chunk = _launch_order(tl.program_id(0), tl.cdiv(T, BLOCK_T), n_chunks, 1 if CHUNK_FIRST else 0)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    rows = row_block * BLOCK_T + tl.arange(0, BLOCK_T)
    row_ok = rows < T
    lse2 = tl.load(lse_ptr + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    gs = tl.load(gscale_ptr + rows, mask=row_ok, other=0.0)
    g_target = (1.0 - tl.exp(tl.load(logp_ptr + rows, mask=row_ok, other=0.0))) * gs
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    tgt = tl.where((tgt >= lo) & (tgt < hi), tgt, -1).to(tl.int32)
    # One 64-bit base per program and 32-bit offsets within the row block (BLOCK_T * V < 2**31): 64-bit pointers
    # per element held the kernel at 255 registers with spills (ptxas -v, sm_90a).
    row_base = y_ptr + (row_block * BLOCK_T).to(tl.int64) * V
    row_off = tl.arange(0, BLOCK_T)[:, None] * V
    ymax_rows = ymax_ptr + chunk * MAX_TILES * T + rows[:, None]
    if ALIGNED:
        first = (lo + 7) // 8 * 8  # the chunk's first 16-byte-aligned column (Triton sees the multiple of 8)
        end8 = hi // 8 * 8  # and the aligned column after its last whole 8
        skew = first - lo  # 0..7: window k's column j is the chunk's column k * BLOCK_V + skew + j
        js = tl.arange(0, BLOCK_V)
        later = (js >= BLOCK_V - skew)[None, :]  # these columns lie in the window's next forward tile
        for k in range(0, tl.cdiv(tl.maximum(end8 - first, 0), BLOCK_V)):
            cols = first + k * BLOCK_V + js
            ok = (cols < end8)[None, :]  # whole 8-column groups: 16-byte accesses
            offs = row_off + cols[None, :]
            y = tl.load(row_base + offs, mask=ok, other=0.0).to(tl.float32)
            here = tl.load(ymax_rows + k * T, mask=row_ok[:, None], other=0.0)
            nxt = tl.load(ymax_rows + (k + 1) * T, mask=row_ok[:, None] & (k + 1 < MAX_TILES), other=0.0)
            g = _grad_terms(y, cols[None, :] == tgt[:, None], tl.where(later, nxt, here), lse2[:, None], gs[:, None], g_target[:, None])
            tl.store(row_base + offs, g, mask=ok)
        # The fewer than 8 columns before `first` and after `end8`: 2-byte accesses, the forward tile per element.
        es = tl.arange(0, 8)
        for part in range(0, 2):
            cols = tl.where(part == 0, lo, tl.maximum(end8, first)) + es
            ok = (cols < tl.where(part == 0, tl.minimum(first, hi), hi))[None, :]
            offs = row_off + cols[None, :]
            y = tl.load(row_base + offs, mask=ok, other=0.0).to(tl.float32)
            mx = tl.load(ymax_rows + ((cols - lo) // BLOCK_V)[None, :] * T, mask=ok & row_ok[:, None], other=0.0)
            tl.store(row_base + offs, _grad_terms(y, cols[None, :] == tgt[:, None], mx, lse2[:, None], gs[:, None], g_target[:, None]), mask=ok)
        return
    base = row_base + lo
    tgt_loc = tgt - lo
    width = hi - lo
    for tile in range(0, tl.cdiv(width, BLOCK_V)):
        cols = tile * BLOCK_V + tl.arange(0, BLOCK_V)
        ok = cols[None, :] < width  # rows past T are the buffer's padding (keep_partials): no row mask
        offs = row_off + cols[None, :]
        y = tl.load(base + offs, mask=ok, other=0.0).to(tl.float32)
        mx = tl.load(ymax_ptr + (chunk * MAX_TILES + tile) * T + rows, mask=row_ok, other=0.0)
        tl.store(base + offs, _grad_terms(y, cols[None, :] == tgt_loc[:, None], mx[:, None], lse2[:, None], gs[:, None], g_target[:, None]), mask=ok)


def keep_partials(hidden, weight_shard, targets, local_bounds, temperature, config=None):
    """(m, s, z_t) partials as triton_partials gives them with ``config`` (default: the Hopper configuration, whose
    base-2 epilogue this kernel repeats), plus the kept (terms [T, shard V] fp16, tile maxima [chunks, tiles per
    chunk, T] fp32, chunk bounds, tile width)."""
    cfg = config or HOPPER_CONFIG
    rows, width = hidden.shape
    vocab = weight_shard.shape[0]
    if width % cfg.block_k or width % 8 or vocab % 8:
        raise ValueError(f"keep plan: needs H divisible by {cfg.block_k} and a shard width divisible by 8; got H={width}, shard V={vocab}")
    hidden, weight_shard = hidden.contiguous(), weight_shard.contiguous()
    n_chunks = len(local_bounds) - 1
    widest = max(b - a for a, b in zip(local_bounds[:-1], local_bounds[1:]))
    max_tiles = triton.cdiv(widest, cfg.block_v)
    dev = hidden.device
    out = torch.empty(3, n_chunks, rows, dtype=torch.float32, device=dev)
    # Rows padded to whole row blocks of both kernels that write the buffer (powers of two, so the larger is a
    # multiple of the other): their stores need no row mask (with one per element the forward spilled 1776 bytes, ptxas -v).
    # The products read the [rows, V] view; the padding rows hold what the kernels computed from no input.
    block = max(cfg.block_t, CONVERT_BLOCK_T)
    y = torch.empty(triton.cdiv(rows, block) * block, vocab, dtype=torch.float16, device=dev)[:rows]
    ymax = torch.empty(n_chunks, max_tiles, rows, dtype=torch.float32, device=dev)
    ensure_allocator()
    bounds = _bounds_tensor(tuple(local_bounds), dev)
    _partials_keep_kernel[(triton.cdiv(rows, cfg.block_t) * n_chunks,)](
        hidden,
        weight_shard,
        targets.contiguous(),
        bounds,
        out,
        y,
        ymax,
        rows,
        vocab,
        width,
        1.0 / temperature,
        n_chunks,
        MAX_TILES=max_tiles,
        BLOCK_T=cfg.block_t,
        BLOCK_V=cfg.block_v,
        BLOCK_K=cfg.block_k,
        GROUP_T=FORWARD_GROUP_T,
        FLATTEN=FORWARD_FLATTEN,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return (out[0], out[1], out[2]), (y, ymax, tuple(local_bounds), cfg.block_v)


def keep_backward(hidden, shards, logp, lse, temperature, grad_out, grad_h, config=None) -> None:
    """The keep plan's backward. ``shards``: per TP rank in rank order, (weight shard, shard-local targets,
    kept (y, ymax, chunk bounds) from keep_partials, local group bounds, grad_w rows of the shard). Fills
    ``grad_h`` [T, H] fp32 (the 8 group partials added left to right) and each shard's grad_w. Consumes the
    kept buffers: they hold grad_logits afterwards."""
    cfg = config or BACKWARD_CONFIG
    rows, width = hidden.shape
    if width % cfg.block_v or width % cfg.hidden_block_h:
        raise ValueError(f"keep plan: backward needs H divisible by {max(cfg.block_v, cfg.hidden_block_h)}; got H={width}")
    from triton.tools.tensor_descriptor import TensorDescriptor

    hidden = hidden.contiguous()
    dev = hidden.device
    scale = (grad_out.float() * (1.0 / temperature)).contiguous()
    g_scale, h_scale, w_rows, w_factor = _row_scales(scale, cfg.g_exp)
    hc = _weight_operand(hidden, w_rows, torch.float16)
    hc_desc = TensorDescriptor.from_tensor(hc, [cfg.block_k, cfg.block_v])
    widest = max(b - a for _, _, _, bounds, _ in shards for a, b in zip(bounds[:-1], bounds[1:]))
    wc = (torch.empty if WEIGHT_COPY_TRITON else torch.zeros)(triton.cdiv(widest, cfg.block_k) * cfg.block_k, width, dtype=torch.float16, device=dev)
    wc_desc = TensorDescriptor.from_tensor(wc, [cfg.block_k, cfg.hidden_block_h])
    partial = None
    first = True
    bt, bk = cfg.block_t, cfg.block_k
    for weight_shard, tgt, (y, ymax, chunk_b, fwd_block_v), group_b, grad_w in shards:
        vocab = weight_shard.shape[0]
        padded = triton.cdiv(rows, CONVERT_BLOCK_T) * CONVERT_BLOCK_T * vocab * y.element_size()
        if y.untyped_storage().nbytes() < padded:
            raise ValueError(f"keep plan: the kept buffer has no padding for row blocks of {CONVERT_BLOCK_T} (keep_partials pads to its own)")
        _keep_convert_kernel[(triton.cdiv(rows, CONVERT_BLOCK_T) * (len(chunk_b) - 1),)](
            y,
            ymax,
            _bounds_tensor(chunk_b, dev),
            tgt.contiguous(),
            lse,
            logp,
            g_scale,
            rows,
            vocab,
            len(chunk_b) - 1,
            MAX_TILES=ymax.shape[1],
            BLOCK_T=CONVERT_BLOCK_T,
            BLOCK_V=fwd_block_v,
            CHUNK_FIRST=CONVERT_CHUNK_FIRST,
            ALIGNED=CONVERT_ALIGNED,
            num_warps=CONVERT_WARPS,
        )
        wgrid = (triton.cdiv(vocab, bt), width // cfg.block_v)
        _grad_weight_kernel[wgrid[::-1] if H_FIRST else wgrid](
            TensorDescriptor.from_tensor(y, [bk, bt]),
            hc_desc,
            grad_w,
            w_factor,
            rows,
            width,
            vocab,
            grad_w.stride(0),
            BLOCK_V=bt,
            BLOCK_H=cfg.block_v,
            BLOCK_K=bk,
            H_FIRST=H_FIRST,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        g_desc = TensorDescriptor.from_tensor(y, [bt, bk])
        last_n = wc.shape[0]
        for g0, g1 in zip(group_b[:-1], group_b[1:]):
            n = g1 - g0
            if WEIGHT_COPY_TRITON:
                _copy_fp16(weight_shard[g0:g1], wc[:n])
                w_desc = TensorDescriptor.from_tensor(wc[:n], [cfg.block_k, cfg.hidden_block_h])  # zeros past row n
            else:
                wc[:n].copy_(weight_shard[g0:g1])
                if n < last_n:
                    wc[n:last_n].zero_()  # the K loop reads up to a multiple of block_k past the group: zeros there
                last_n = n
                w_desc = wc_desc
            add = not first and GROUP_SUM_IN_KERNEL
            if first or add:
                acc = grad_h
            else:
                partial = partial if partial is not None else torch.empty(rows, width, dtype=torch.float32, device=dev)
                acc = partial
            hgrid = (triton.cdiv(rows, bt), width // cfg.hidden_block_h)
            _grad_hidden_kernel[hgrid[::-1] if H_FIRST else hgrid](
                g_desc,
                w_desc,
                acc,
                h_scale,
                rows,
                width,
                0,
                n,
                g0,
                ACCUMULATE=False,
                SCALE_ROWS=True,
                BLOCK_T=bt,
                BLOCK_H=cfg.hidden_block_h,
                BLOCK_K=bk,
                H_FIRST=H_FIRST,
                ADD_TO_SUM=add,
                num_warps=cfg.hidden_warps,
                num_stages=cfg.hidden_stages,
            )
            if not first and not add:
                grad_h += partial  # fused_plan.sum_group_partials' left-to-right adds
            first = False


@triton.jit
def _copy_fp16_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n).to(tl.float16), mask=offs < n)


def _copy_fp16(src: torch.Tensor, dst: torch.Tensor, block: int = 8192) -> None:
    """dst (fp16, contiguous) = src rounded to fp16, as torch's copy_ rounds it."""
    n = src.numel()
    _copy_fp16_kernel[(triton.cdiv(n, block),)](src, dst, n, BLOCK=block, num_warps=8)
