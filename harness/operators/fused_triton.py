"""The fused operator's partials as one Triton kernel (CUDA).

Grid: (row blocks of BLOCK_T, local vocab chunks). Each program streams its chunk's weight rows in
tiles of BLOCK_V, multiplies them with its BLOCK_T hidden rows (bf16 operands, fp32 accumulator via
tl.dot), scales by 1/T and folds the tile into an online log-sum-exp. No T x V logits exist; what
leaves the kernel is 3 x chunks x T floats. The tile sizes are fixed (never chosen from T), so a row's
arithmetic is the same in any batch; the chunk plan (fused_plan.py) makes it the same under any TP
split.

Two loop shapes compute identical arithmetic: ``nested`` (a K loop inside the tile loop) and ``flat``
(one loop over tile x K steps with the epilogue under ``if``, as Triton's persistent-matmul tutorial
does, so the software pipeline does not drain at every tile).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class KernelConfig:
    block_t: int = 128
    block_v: int = 256
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    variant: str = "flat"

    def as_dict(self) -> dict:
        return asdict(self)


# Chosen on the H200 by tools/bench_operators.py --sweep (reports/bench/h200-fused-sweep.json,
# docs/operators.md): operands fetched by TMA, loop nest flattened by the compiler so the software
# pipeline runs across vocab tiles. Fixed thereafter: a different configuration gives different bits
# (never a loss of invariance). Pre-Hopper GPUs have no TMA and take the pointer-load kernel.
HOPPER_CONFIG = KernelConfig(128, 256, 64, 8, 3, "tma_flatten")
FALLBACK_CONFIG = KernelConfig(128, 256, 64, 8, 3, "nested")


def default_config(device: torch.device) -> KernelConfig:
    return HOPPER_CONFIG if torch.cuda.get_device_capability(device) >= (9, 0) else FALLBACK_CONFIG
VARIANTS = {"nested": 0, "flat": 1, "flatten": 2, "ws": 3}
TMA_LOOPS = {"tma": 0, "tma_flatten": 2, "tma_ws": 3}


@triton.jit
def _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t):
    in_chunk = cols[None, :] < hi
    z = tl.where(in_chunk, acc * inv_temp, float("-inf"))
    m_new = tl.maximum(m, tl.max(z, axis=1))
    s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), axis=1)
    z_t = z_t + tl.sum(tl.where((cols[None, :] == tgt[:, None]) & in_chunk, z, 0.0), axis=1)
    return m_new, s, z_t


@triton.jit(do_not_specialize=["T"])
def _partials_kernel(
    h_ptr, w_ptr, tgt_ptr, bounds_ptr, out_ptr,
    T, H, stride_h, stride_w, inv_temp,
    BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, VARIANT: tl.constexpr,
):
    pid_t = tl.program_id(0)
    chunk = tl.program_id(1)
    n_chunks = tl.num_programs(1)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    row_ok = rows < T
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    ks = tl.arange(0, BLOCK_K)
    vs = tl.arange(0, BLOCK_V)
    h_base = h_ptr + rows[:, None].to(tl.int64) * stride_h + ks[None, :]
    m = tl.full([BLOCK_T], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_T], tl.float32)
    z_t = tl.zeros([BLOCK_T], tl.float32)
    k_steps = H // BLOCK_K
    n_tiles = tl.cdiv(hi - lo, BLOCK_V)
    if VARIANT == 1:  # manual flat loop (epilogue under if)
        acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
        ki = -1
        tile = -1
        cols = lo + vs
        for _ in range(0, n_tiles * k_steps):
            ki = tl.where(ki == k_steps - 1, 0, ki + 1)
            if ki == 0:
                tile += 1
                cols = lo + tile * BLOCK_V + vs
            a = tl.load(h_base + ki * BLOCK_K, mask=row_ok[:, None], other=0.0)
            w_tile = w_ptr + cols[None, :].to(tl.int64) * stride_w + (ki * BLOCK_K + ks)[:, None]
            b = tl.load(w_tile, mask=cols[None, :] < hi, other=0.0)
            acc = tl.dot(a, b, acc)
            if ki == k_steps - 1:
                m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
                acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
    elif VARIANT == 2:  # compiler-flattened loop nest
        for tile in tl.range(0, n_tiles, flatten=True):
            cols = lo + tile * BLOCK_V + vs
            w_base = w_ptr + cols[None, :].to(tl.int64) * stride_w + ks[:, None]
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in range(0, k_steps):
                a = tl.load(h_base + ki * BLOCK_K, mask=row_ok[:, None], other=0.0)
                b = tl.load(w_base + ki * BLOCK_K, mask=cols[None, :] < hi, other=0.0)
                acc = tl.dot(a, b, acc)
            m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
    elif VARIANT == 3:  # warp-specialised K loop
        for tile in range(0, n_tiles):
            cols = lo + tile * BLOCK_V + vs
            w_base = w_ptr + cols[None, :].to(tl.int64) * stride_w + ks[:, None]
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in tl.range(0, k_steps, warp_specialize=True):
                a = tl.load(h_base + ki * BLOCK_K, mask=row_ok[:, None], other=0.0)
                b = tl.load(w_base + ki * BLOCK_K, mask=cols[None, :] < hi, other=0.0)
                acc = tl.dot(a, b, acc)
            m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
    else:  # nested
        for tile in range(0, n_tiles):
            cols = lo + tile * BLOCK_V + vs
            w_base = w_ptr + cols[None, :].to(tl.int64) * stride_w + ks[:, None]
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in range(0, k_steps):
                a = tl.load(h_base + ki * BLOCK_K, mask=row_ok[:, None], other=0.0)
                b = tl.load(w_base + ki * BLOCK_K, mask=cols[None, :] < hi, other=0.0)
                acc = tl.dot(a, b, acc)
            m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
    plane = n_chunks * T
    base = out_ptr + chunk * T + rows
    tl.store(base, m, mask=row_ok)
    tl.store(base + plane, s, mask=row_ok)
    tl.store(base + 2 * plane, z_t, mask=row_ok)


@triton.jit(do_not_specialize=["T"])
def _partials_kernel_tma(
    h_desc, w_desc, tgt_ptr, bounds_ptr, out_ptr, T, H, inv_temp,
    BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, LOOP: tl.constexpr,
):
    """Same arithmetic, operands fetched by the tensor-memory accelerator (Hopper's bulk copy)."""
    pid_t = tl.program_id(0)
    chunk = tl.program_id(1)
    n_chunks = tl.num_programs(1)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    row0 = pid_t * BLOCK_T
    rows = row0 + tl.arange(0, BLOCK_T)
    row_ok = rows < T
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    vs = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_T], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_T], tl.float32)
    z_t = tl.zeros([BLOCK_T], tl.float32)
    k_steps = H // BLOCK_K
    n_tiles = tl.cdiv(hi - lo, BLOCK_V)
    # Columns past the chunk's end are fetched (next chunk, or zero past the shard) and masked in
    # the epilogue, so they never enter the sums.
    if LOOP == 2:
        for tile in tl.range(0, n_tiles, flatten=True):
            v0 = lo + tile * BLOCK_V
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in range(0, k_steps):
                acc = tl.dot(h_desc.load([row0, ki * BLOCK_K]), w_desc.load([v0, ki * BLOCK_K]).T, acc)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    elif LOOP == 3:
        for tile in range(0, n_tiles):
            v0 = lo + tile * BLOCK_V
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in tl.range(0, k_steps, warp_specialize=True):
                acc = tl.dot(h_desc.load([row0, ki * BLOCK_K]), w_desc.load([v0, ki * BLOCK_K]).T, acc)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    else:
        for tile in range(0, n_tiles):
            v0 = lo + tile * BLOCK_V
            acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
            for ki in range(0, k_steps):
                acc = tl.dot(h_desc.load([row0, ki * BLOCK_K]), w_desc.load([v0, ki * BLOCK_K]).T, acc)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    plane = n_chunks * T
    base = out_ptr + chunk * T + rows
    tl.store(base, m, mask=row_ok)
    tl.store(base + plane, s, mask=row_ok)
    tl.store(base + 2 * plane, z_t, mask=row_ok)


def triton_partials(hidden, weight_shard, targets, local_bounds, temperature, config: KernelConfig | None = None):
    """Partials (m, s, z_t), each [len(local_bounds)-1, T] fp32, computed on the GPU."""
    rows, width = hidden.shape
    config = config or default_config(hidden.device)
    if width % config.block_k:
        raise ValueError(f"fused kernel needs H divisible by block_k={config.block_k}; got H={width}")
    hidden = hidden.contiguous()
    weight_shard = weight_shard.contiguous()
    if hidden.dtype != weight_shard.dtype:
        raise ValueError(f"hidden and weight dtypes differ: {hidden.dtype} vs {weight_shard.dtype}")
    n_chunks = len(local_bounds) - 1
    bounds = torch.tensor(local_bounds, dtype=torch.int32, device=hidden.device)
    out = torch.empty(3, n_chunks, rows, dtype=torch.float32, device=hidden.device)
    grid = (triton.cdiv(rows, config.block_t), n_chunks)
    if config.variant.startswith("tma"):
        from triton.tools.tensor_descriptor import TensorDescriptor

        _partials_kernel_tma[grid](
            TensorDescriptor.from_tensor(hidden, [config.block_t, config.block_k]),
            TensorDescriptor.from_tensor(weight_shard, [config.block_v, config.block_k]),
            targets.contiguous(), bounds, out, rows, width, 1.0 / temperature,
            BLOCK_T=config.block_t, BLOCK_V=config.block_v, BLOCK_K=config.block_k, LOOP=TMA_LOOPS[config.variant],
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
        return out[0], out[1], out[2]
    _partials_kernel[grid](
        hidden, weight_shard, targets.contiguous(), bounds, out,
        rows, width, hidden.stride(0), weight_shard.stride(0), 1.0 / temperature,
        BLOCK_T=config.block_t, BLOCK_V=config.block_v, BLOCK_K=config.block_k, VARIANT=VARIANTS[config.variant],
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out[0], out[1], out[2]
