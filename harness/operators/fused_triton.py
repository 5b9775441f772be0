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

from dataclasses import asdict, dataclass, replace

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
    # exp2: the device-TMA kernel's epilogue in base 2 (max over the raw accumulator, one FMA and one ex2
    # per logit, the target picked from the raw accumulator), partials handed back in natural units.
    # Different bits from the natural-exp epilogue, the same invariance. maxnreg: a register cap (0: none).
    exp2: bool = False
    maxnreg: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


# Chosen on the H200 by tools/bench_operators.py --sweep (docs/operators.md): operands fetched by TMA,
# loop nest flattened by the compiler so the software pipeline runs across vocab tiles. Fixed thereafter:
# a different configuration gives different bits (never a loss of invariance). Pre-Hopper GPUs have no TMA
# and take the pointer-load kernel. The TMA descriptors are made on the device (dtma_flatten: bitwise equal
# to tma_flatten at every T, ~25 us less host time per call), and the epilogue is base 2 (exp2: 0.97-0.98x
# the natural-exp kernel's time at every T, no spills): the same plan and invariance.
HOPPER_CONFIG = KernelConfig(128, 256, 64, 8, 3, "dtma_flatten", exp2=True)
FALLBACK_CONFIG = KernelConfig(128, 256, 64, 8, 3, "nested")


def default_config(device: torch.device) -> KernelConfig:
    return HOPPER_CONFIG if torch.cuda.get_device_capability(device) >= (9, 0) else FALLBACK_CONFIG


VARIANTS = {"nested": 0, "flat": 1, "flatten": 2, "ws": 3}
TMA_LOOPS = {"tma": 0, "tma_flatten": 2, "tma_ws": 3, "tma_flatten_ws": 4}
# dtma_*: the same TMA kernel with its two descriptors built by each program on the device
# (tl.make_tensor_descriptor) instead of encoded on the host at every launch.
DEVICE_TMA_LOOPS = {"dtma_flatten": 2}
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t):
    in_chunk = cols[None, :] < hi
    z = tl.where(in_chunk, acc * inv_temp, float("-inf"))
    m_new = tl.maximum(m, tl.max(z, axis=1))
    s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), axis=1)
    z_t = z_t + tl.sum(tl.where((cols[None, :] == tgt[:, None]) & in_chunk, z, 0.0), axis=1)
    return m_new, s, z_t


@triton.jit
def _epilogue_exp2(acc, cols, hi, tgt_in_chunk, scale2, m2, s, t_acc):
    """_epilogue in base 2: m2 is the running max of acc * scale2 (scale2 = log2(e) / T; max commutes with
    a positive scale), each logit costs one FMA and one ex2, and the target's raw accumulator is picked
    (tgt_in_chunk is -1 for rows whose target lies outside the chunk, so no chunk mask is needed there)."""
    a = tl.where(cols[None, :] < hi, acc, float("-inf"))
    m_new = tl.maximum(m2, tl.max(a, axis=1) * scale2)
    s = s * tl.exp2(m2 - m_new) + tl.sum(tl.exp2(a * scale2 - m_new[:, None]), axis=1)
    # picked from the masked tile (equal to acc wherever a target column can match): one [BLOCK_T, BLOCK_V]
    # tensor live, not two (both live spilled 140 registers at 128x256, 8 warps)
    t_acc = t_acc + tl.sum(tl.where(cols[None, :] == tgt_in_chunk[:, None], a, 0.0), axis=1)
    return m_new, s, t_acc


@triton.jit
def _tile_acc_ptr(
    h_base, w_ptr, cols, hi, row_ok, ks, stride_w, k_steps, BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, WS: tl.constexpr
):
    """One [BLOCK_T, BLOCK_V] tile of fp32 logits (unscaled) by pointer loads, K from 0 in BLOCK_K steps."""
    w_base = w_ptr + cols[None, :].to(tl.int64) * stride_w + ks[:, None]
    acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
    for ki in tl.range(0, k_steps, warp_specialize=WS):
        a = tl.load(h_base + ki * BLOCK_K, mask=row_ok[:, None], other=0.0)
        b = tl.load(w_base + ki * BLOCK_K, mask=cols[None, :] < hi, other=0.0)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, WS: tl.constexpr):
    """One [BLOCK_T, BLOCK_V] tile of fp32 logits (unscaled) through TMA descriptors, K from 0 in BLOCK_K steps."""
    acc = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
    for ki in tl.range(0, k_steps, warp_specialize=WS):
        acc = tl.dot(h_desc.load([row0, ki * BLOCK_K]), w_desc.load([v0, ki * BLOCK_K]).T, acc)
    return acc


@triton.jit
def _store_partials(out_ptr, chunk, n_chunks, T, rows, row_ok, m, s, z_t):
    plane = n_chunks * T
    base = out_ptr + chunk * T + rows
    tl.store(base, m, mask=row_ok)
    tl.store(base + plane, s, mask=row_ok)
    tl.store(base + 2 * plane, z_t, mask=row_ok)


@triton.jit(do_not_specialize=["T"])
def _partials_kernel(
    h_ptr,
    w_ptr,
    tgt_ptr,
    bounds_ptr,
    out_ptr,
    T,
    H,
    stride_h,
    stride_w,
    inv_temp,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    VARIANT: tl.constexpr,
):
    pid_t = tl.program_id(0)
    chunk = tl.program_id(1)
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
            acc = _tile_acc_ptr(h_base, w_ptr, cols, hi, row_ok, ks, stride_w, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
            m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
    else:  # nested (0), or its K loop warp-specialised (3)
        for tile in range(0, n_tiles):
            cols = lo + tile * BLOCK_V + vs
            acc = _tile_acc_ptr(h_base, w_ptr, cols, hi, row_ok, ks, stride_w, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, VARIANT == 3)
            m, s, z_t = _epilogue(acc, cols, hi, tgt, inv_temp, m, s, z_t)
    _store_partials(out_ptr, chunk, tl.num_programs(1), T, rows, row_ok, m, s, z_t)


@triton.jit(do_not_specialize=["T"])
def _partials_kernel_tma(
    h_desc,
    w_desc,
    tgt_ptr,
    bounds_ptr,
    out_ptr,
    T,
    H,
    inv_temp,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LOOP: tl.constexpr,
):
    """Same arithmetic, operands fetched by the tensor-memory accelerator (Hopper's bulk copy)."""
    chunk = tl.program_id(1)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    row0 = tl.program_id(0) * BLOCK_T
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
            acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    elif LOOP == 4:  # flattened and warp-specialised: a producer warp feeds the MMA while the epilogue runs
        for tile in tl.range(0, n_tiles, flatten=True, warp_specialize=True):
            v0 = lo + tile * BLOCK_V
            acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    else:  # nested (0), or its K loop warp-specialised (3)
        for tile in range(0, n_tiles):
            v0 = lo + tile * BLOCK_V
            acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, LOOP == 3)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    _store_partials(out_ptr, chunk, tl.num_programs(1), T, rows, row_ok, m, s, z_t)


@triton.jit(do_not_specialize=["T", "V"])
def _partials_kernel_dtma(
    h_ptr,
    w_ptr,
    tgt_ptr,
    bounds_ptr,
    out_ptr,
    T,
    V,
    H,
    inv_temp,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EXP2: tl.constexpr,
):
    """_partials_kernel_tma's flattened loop (same loads, same tl.dot sequence, same epilogue) with the
    descriptors made on the device: the host encodes nothing per launch (docs/operators.md has the
    host time this saves). EXP2: the base-2 epilogue (KernelConfig.exp2)."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[T, H], strides=[H, 1], block_shape=[BLOCK_T, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[V, H], strides=[H, 1], block_shape=[BLOCK_V, BLOCK_K])
    chunk = tl.program_id(1)
    lo = tl.load(bounds_ptr + chunk)
    hi = tl.load(bounds_ptr + chunk + 1)
    row0 = tl.program_id(0) * BLOCK_T
    rows = row0 + tl.arange(0, BLOCK_T)
    row_ok = rows < T
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
    vs = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_T], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_T], tl.float32)
    z_t = tl.zeros([BLOCK_T], tl.float32)
    k_steps = H // BLOCK_K
    n_tiles = tl.cdiv(hi - lo, BLOCK_V)
    if EXP2:
        scale2 = inv_temp * 1.4426950408889634
        tgt = tl.where((tgt >= lo) & (tgt < hi), tgt, -1).to(tl.int32)  # int32: a 32-bit compare per logit, not 64
        for tile in tl.range(0, n_tiles, flatten=True):
            v0 = lo + tile * BLOCK_V
            acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
            m, s, z_t = _epilogue_exp2(acc, v0 + vs, hi, tgt, scale2, m, s, z_t)
        m = m * 0.6931471805599453  # back to natural units: the merge and the TP all-gather are unchanged
        z_t = z_t * inv_temp
    else:
        for tile in tl.range(0, n_tiles, flatten=True):
            v0 = lo + tile * BLOCK_V
            acc = _tile_acc_tma(h_desc, w_desc, row0, v0, k_steps, BLOCK_T, BLOCK_V, BLOCK_K, False)
            m, s, z_t = _epilogue(acc, v0 + vs, hi, tgt, inv_temp, m, s, z_t)
    _store_partials(out_ptr, chunk, tl.num_programs(1), T, rows, row_ok, m, s, z_t)


def _scratch(size: int, alignment: int, stream):
    # Global scratch for device-made descriptors (128 bytes per descriptor per program), from torch's
    # caching allocator: freed after the launch, reused in stream order.
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Give Triton an allocator for kernels that need global scratch, unless one is already set (a
    caller's own is kept). Per thread context: Triton keeps it in a ContextVar."""
    from triton.runtime import _allocation

    if type(_allocation._allocator.get()).__name__ == "NullAllocator":
        triton.set_allocator(_scratch)


class _CompiledLaunch:
    """Launches one Triton kernel through its compiled form once that is known for a key, skipping
    JITFunction.run's per-call argument binding and specialisation (tens of microseconds per launch in
    Triton 3.6, time the idle GPU waits for at the start of a forward call; docs/operators.md).

    The key must hold everything Triton specialises the kernel on: each tensor's dtype and 16-byte
    alignment, each specialised integer's (== 1, % 16, 32/64-bit) class, the integer width of the
    unspecialised ones, the constexprs and the launch options. A new key, or the interpreter (which
    returns no compiled kernel), takes Triton's own path.

    ``direct(key)``: where the compiled kernel's launcher has Triton 3.6's form (a C ``launch`` taking
    grid, stream, function, the two scratch pointers, the metadata and the arguments), the pieces to call
    that C function straight away (:func:`_direct_pieces`), else None. The caller then passes pointers as
    ints (no ``data_ptr()`` nor pointer query per tensor) and its own global scratch (no allocator call).
    """

    def __init__(self, fn):
        self.fn, self.compiled, self._direct = fn, {}, {}

    def __call__(self, key: tuple, grid: tuple, args: tuple, **options):
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.fn[grid](*args, **options)
            if compiled is not None and hasattr(compiled, "packed_metadata"):
                self.compiled[key] = compiled
                self._direct[key] = _direct_pieces(compiled)
            return
        stream = torch.cuda.current_stream().cuda_stream
        compiled.run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args)

    def direct(self, key: tuple):
        return self._direct.get(key)


# Experiments: False sends every launch through _CompiledLaunch.__call__ (compiled.run), Triton's own launch path.
DIRECT_LAUNCH = True
_DIRECT_CALL_PARAMS = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]


def _direct_pieces(compiled):
    """(C launch, function, cooperative, pdl, scratch bytes per program, scratch alignment, metadata) of a
    compiled kernel whose launcher is Triton 3.6's CudaLauncher (checked by its call signature and
    attributes; anything else, or a profile scratch, returns None and the caller keeps ``compiled.run``)."""
    import inspect

    run = compiled.run
    try:
        params = list(inspect.signature(type(run).__call__).parameters)
        pieces = (
            run.launch,
            compiled.function,
            run.launch_cooperative_grid,
            run.launch_pdl,
            run.global_scratch_size * run.num_ctas,
            max(run.global_scratch_align, 1),
            compiled.packed_metadata,
        )
        plain = params == _DIRECT_CALL_PARAMS and not run.profile_scratch_size
    except (AttributeError, TypeError, ValueError):
        return None
    return pieces if plain else None


def _int_class(x: int, specialised: bool) -> tuple:
    wide = not -(2**31) <= x < 2**31
    return (wide, x == 1, x % 16 == 0) if specialised else (wide,)


_launch_partials_dtma = _CompiledLaunch(_partials_kernel_dtma)
_BOUNDS: dict = {}


def _bounds_tensor(bounds: tuple, device) -> torch.Tensor:
    """Chunk bounds on the device, made once per (bounds, device): a host-to-device copy per call
    costs as much as the whole kernel at T=256."""
    key = (bounds, device)
    found = _BOUNDS.get(key)
    if found is None:
        found = _BOUNDS[key] = torch.tensor(bounds, dtype=torch.int32, device=device)
    return found


_CONFIGS: dict = {}


def _device_config(device: torch.device) -> KernelConfig:
    # default_config asks torch for the device's capability (a few us of host time per call)
    found = _CONFIGS.get(device)
    if found is None:
        found = _CONFIGS[device] = default_config(device)
    return found


def _partials_direct(direct, grid, device, ptrs, consts, n_chunks, rows):
    """The partials kernel through its C launcher (see _CompiledLaunch.direct): one allocation holds the
    [3, n_chunks, rows] output and the programs' descriptor scratch behind it (the scratch lives as long
    as the output, in the launch's stream order), pointers passed as ints. Views are made after the
    launch, so the GPU is not kept waiting for them."""
    launch, function, coop, pdl, scratch_each, align, meta = direct
    out_bytes = 12 * n_chunks * rows
    offset = -(-out_bytes // align) * align
    buf = torch.empty(offset + grid[0] * grid[1] * scratch_each, dtype=torch.uint8, device=device)
    base = buf.data_ptr()
    stream = torch._C._cuda_getCurrentRawStream(device.index)
    launch(
        grid[0], grid[1], 1, stream, function, coop, pdl, base + offset if scratch_each else None, None, meta, None, None, None, *ptrs, base, *consts
    )
    out = buf[:out_bytes].view(torch.float32).view(3, n_chunks, rows)
    return out[0], out[1], out[2]


def triton_partials(hidden, weight_shard, targets, local_bounds, temperature, config: KernelConfig | None = None):
    """Partials (m, s, z_t), each [len(local_bounds)-1, T] fp32, computed on the GPU."""
    rows, width = hidden.shape
    device = hidden.device
    config = config or _device_config(device)
    if width % config.block_k:
        raise ValueError(f"fused kernel needs H divisible by block_k={config.block_k}; got H={width}")
    hidden = hidden.contiguous()
    weight_shard = weight_shard.contiguous()
    if hidden.dtype != weight_shard.dtype:
        raise ValueError(f"hidden and weight dtypes differ: {hidden.dtype} vs {weight_shard.dtype}")
    n_chunks = len(local_bounds) - 1
    bounds = _bounds_tensor(local_bounds if type(local_bounds) is tuple else tuple(local_bounds), device)
    grid = (triton.cdiv(rows, config.block_t), n_chunks)
    if config.variant in DEVICE_TMA_LOOPS:
        h_ptr, w_ptr = hidden.data_ptr(), weight_shard.data_ptr()
        if width % 8 or h_ptr % 16 or w_ptr % 16:
            raise ValueError("device TMA descriptors need 16-byte aligned operands and rows (H divisible by 8)")
        tgt = targets.contiguous()
        vocab = weight_shard.shape[0]
        key = (
            device.index,
            hidden.dtype,
            tgt.dtype,
            tgt.data_ptr() % 16 == 0,
            _int_class(rows, False),
            _int_class(vocab, False),
            _int_class(width, True),
            config,
        )
        consts = (rows, vocab, width, 1.0 / temperature, config.block_t, config.block_v, config.block_k, config.exp2)
        direct = _launch_partials_dtma.direct(key) if DIRECT_LAUNCH else None
        if direct is not None:
            return _partials_direct(direct, grid, device, (h_ptr, w_ptr, tgt.data_ptr(), bounds.data_ptr()), consts, n_chunks, rows)
        ensure_allocator()
        out = torch.empty(3, n_chunks, rows, dtype=torch.float32, device=device)
        opts = {"maxnreg": config.maxnreg} if config.maxnreg else {}
        _launch_partials_dtma(
            key, grid, (hidden, weight_shard, tgt, bounds, out, *consts), num_warps=config.num_warps, num_stages=config.num_stages, **opts
        )
        return out[0], out[1], out[2]
    out = torch.empty(3, n_chunks, rows, dtype=torch.float32, device=device)
    if config.variant.startswith("tma"):
        from triton.tools.tensor_descriptor import TensorDescriptor

        _partials_kernel_tma[grid](
            TensorDescriptor.from_tensor(hidden, [config.block_t, config.block_k]),
            TensorDescriptor.from_tensor(weight_shard, [config.block_v, config.block_k]),
            targets.contiguous(),
            bounds,
            out,
            rows,
            width,
            1.0 / temperature,
            BLOCK_T=config.block_t,
            BLOCK_V=config.block_v,
            BLOCK_K=config.block_k,
            LOOP=TMA_LOOPS[config.variant],
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )
        return out[0], out[1], out[2]
    _partials_kernel[grid](
        hidden,
        weight_shard,
        targets.contiguous(),
        bounds,
        out,
        rows,
        width,
        hidden.stride(0),
        weight_shard.stride(0),
        1.0 / temperature,
        BLOCK_T=config.block_t,
        BLOCK_V=config.block_v,
        BLOCK_K=config.block_k,
        VARIANT=VARIANTS[config.variant],
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out[0], out[1], out[2]


# ---------------------------------------------------------------------------------------------
# Merge of the chunk partials (GPU): one program per row block, chunks folded in order.


@triton.jit(do_not_specialize=["T", "vocab"])
def _merge_kernel(
    m_ptr,
    s_ptr,
    z_ptr,
    logp_ptr,
    lse_ptr,
    tgt_ptr,
    bad_ptr,
    T,
    vocab,
    N_CHUNKS: tl.constexpr,
    BLOCK: tl.constexpr,
    CHECK: tl.constexpr,
    GROUP: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = rows < T
    # Chunks 1.. N_CHUNKS-1 in order, GROUP at a time unrolled (static_range) inside a rolled loop, the rest
    # unrolled after it: a group's 3 x GROUP loads are independent and issue together, where a rolled loop
    # waited on each chunk's load in turn (~58 us per call: 240 dependent round trips to memory), and fully
    # unrolled (GROUP >= N_CHUNKS) the form without the range check spilled 122 registers (19 us against 7).
    # The same arithmetic in the same order for any GROUP, so the same bits.
    n_main: tl.constexpr = (N_CHUNKS - 1) // GROUP * GROUP
    big = tl.load(m_ptr + rows, mask=ok, other=0.0)
    for c0 in range(1, 1 + n_main, GROUP):
        for i in tl.static_range(GROUP):
            big = tl.maximum(big, tl.load(m_ptr + (c0 + i) * T + rows, mask=ok, other=0.0))
    for c in tl.static_range(1 + n_main, N_CHUNKS):
        big = tl.maximum(big, tl.load(m_ptr + c * T + rows, mask=ok, other=0.0))
    total = tl.load(s_ptr + rows, mask=ok, other=1.0) * tl.exp(tl.load(m_ptr + rows, mask=ok, other=0.0) - big)
    target = tl.load(z_ptr + rows, mask=ok, other=0.0)
    for c0 in range(1, 1 + n_main, GROUP):
        for i in tl.static_range(GROUP):
            m_c = tl.load(m_ptr + (c0 + i) * T + rows, mask=ok, other=0.0)
            total = total + tl.load(s_ptr + (c0 + i) * T + rows, mask=ok, other=1.0) * tl.exp(m_c - big)
            target = target + tl.load(z_ptr + (c0 + i) * T + rows, mask=ok, other=0.0)
    for c in tl.static_range(1 + n_main, N_CHUNKS):
        m_c = tl.load(m_ptr + c * T + rows, mask=ok, other=0.0)
        total = total + tl.load(s_ptr + c * T + rows, mask=ok, other=1.0) * tl.exp(m_c - big)
        target = target + tl.load(z_ptr + c * T + rows, mask=ok, other=0.0)
    lse = big + tl.log(total)
    logp = target - lse
    if CHECK:  # the targets' range, checked here instead of by a host sync: bad rows get NaN and a flag
        tgt = tl.load(tgt_ptr + rows, mask=ok, other=0)
        bad = ok & ((tgt < 0) | (tgt >= vocab))
        logp = tl.where(bad, float("nan"), logp)
        lse = tl.where(bad, float("nan"), lse)
        n_bad = tl.sum(bad.to(tl.int32), axis=0)
        if n_bad > 0:  # plain stores (racing blocks write the same kind of record); nothing written when all are in range
            tl.store(bad_ptr, n_bad)
            tl.store(bad_ptr + 1, vocab)
    tl.store(logp_ptr + rows, logp, mask=ok)
    tl.store(lse_ptr + rows, lse, mask=ok)


_MERGE_BLOCK = 128
# Chunks per unrolled group in the merge, with and without the range check (any value gives the same bits;
# >= N_CHUNKS unrolls everything). Measured on the H200:
# with the check, fully unrolled 7 us and no spills; without it, fully unrolled spills 122 registers (12 us),
# groups of 8 spill nothing (40 registers) but wait on 15 rolled round trips (21 us in either form).
MERGE_GROUP = 120
MERGE_GROUP_UNCHECKED = 120
_launch_merge = _CompiledLaunch(_merge_kernel)


def triton_merge(m, s, z_t, targets=None, vocab: int = 0, flag=None):
    """(selected log-prob [T], log-sum-exp [T]) from [N_CHUNKS, T] partials, chunk order, one launch.

    With ``targets`` (global ids), ``vocab`` and ``flag`` (int32 [2], zero; device memory or pinned host
    memory the GPU writes through): rows whose target lies outside [0, vocab) get NaN log-prob and lse,
    and the kernel writes (a block's count of them, vocab) into ``flag``; the caller reads it whenever it
    likes (no sync here). The other rows' arithmetic is unchanged.
    """
    n_chunks, rows = m.shape
    m, s, z_t = m.contiguous(), s.contiguous(), z_t.contiguous()
    device = m.device
    check = targets is not None
    tgt = targets.contiguous() if check else None
    grid = (triton.cdiv(rows, _MERGE_BLOCK), 1)
    consts = (rows, vocab, n_chunks, _MERGE_BLOCK, check, MERGE_GROUP if check else MERGE_GROUP_UNCHECKED)
    # partials are fp32 [N, T] views, 16-byte aligned whenever T % 4 == 0: the key says which
    ptrs = (m.data_ptr(), s.data_ptr(), z_t.data_ptr())
    # lse is out[1], 16-byte aligned iff T % 4 == 0; the flag's alignment too when checking
    aligned = (*(p % 16 == 0 for p in ptrs), rows % 4 == 0)
    checked = check and (tgt.dtype, tgt.data_ptr() % 16 == 0, flag.data_ptr() % 16 == 0)
    key = (device.index, m.dtype, aligned, checked, _int_class(rows, False), _int_class(vocab, False), consts[2:])
    direct = _launch_merge.direct(key) if DIRECT_LAUNCH else None
    out = torch.empty(2, rows, dtype=torch.float32, device=device)
    if direct is not None:
        launch, function, coop, pdl, _, _, meta = direct
        base = out.data_ptr()
        stream = torch._C._cuda_getCurrentRawStream(device.index)
        launch(
            grid[0],
            1,
            1,
            stream,
            function,
            coop,
            pdl,
            None,
            None,
            meta,
            None,
            None,
            None,
            *ptrs,
            base,
            base + 4 * rows,
            tgt.data_ptr() if check else base,
            flag if check else base,
            *consts,
        )
        return out[0], out[1]
    logp, lse = out[0], out[1]
    args = (m, s, z_t, logp, lse, tgt if check else logp, flag if check else logp, *consts)
    _launch_merge(key, grid, args, num_warps=4)
    return logp, lse


# ---------------------------------------------------------------------------------------------
# Backward: per vocab slice, (1) grad_logits recomputed tile by tile and stored as a [T, slice]
# 16-bit buffer, (2) grad_weight rows of the slice = grad_logits^T @ hidden (rows of T reduced in
# fixed blocks from row 0), (3) grad_hidden group partial += grad_logits @ weight_slice. The buffer
# holds grad_out's mantissa only; its exponent goes into (2) and (3) exactly (BackwardConfig.g_exp).


@dataclass(frozen=True)
class BackwardConfig:
    # Vocab columns per step: the most whose [T, slice] grad_logits buffer fits g_buffer_bytes
    # (a multiple of block_v, at least block_v, at most the group). No bit depends on it (see
    # _grad_hidden_kernel); it only trades launches (small T) against memory (large T).
    g_buffer_bytes: int = 64 * 2**20
    slice_cols: int = 0  # > 0: a fixed slice width instead (experiments)
    g_dtype: str = "fp16"  # grad_logits buffer: fp16 keeps 11 bits (bf16's 8 give ~1.5e-3 rel. error)
    # The buffer holds (onehot - softmax) * m * 2**g_exp, where grad_out / temperature = m * 2**e per row (m in
    # [1/2, 1), frexp): never grad_out's exponent. |onehot - softmax| * |m| < 1, so 2**15 keeps every entry below fp16's
    # max (65504) and a probability down to 3.7e-9 a normal fp16 number, whatever grad_out's scale (a mean loss over
    # N tokens hands each 1/N, which flushed (onehot - softmax) * grad_out to zero). The power of two 2**(e - g_exp)
    # is applied exactly in fp32: per row on each group's grad_hidden partial (the grad_hidden kernel's last slice),
    # and through the grad_weight product's other operand (_row_scales).
    g_exp: int = 15
    block_t: int = 128
    block_v: int = 256
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    # The weight slice's 16-bit copy (for grad_hidden) made by one extra row of grad_logits programs
    # instead of a torch copy per slice (41 launches and 0.9 ms at T=8192). No bit depends on it.
    copy_in_logits: bool = True
    # Tiles of the grad_logits and grad_hidden kernels (vocab columns / H columns, warps, pipeline
    # depth). Each element's K order is the same at any tile width; smaller tiles let two programs
    # share an SM, so one's epilogue or partial round trip overlaps the other's MMAs.
    logits_block_v: int = 128  # 128 vs 256: 1.12x vs 1.23-1.27x the forward kernel's time, same bits (H200)
    logits_warps: int = 8
    logits_stages: int = 3
    hidden_block_h: int = 256
    hidden_warps: int = 8
    hidden_stages: int = 3
    even_slices: bool = True  # cut each group into equal slices (multiples of block_v), not full ones and a short last one
    # grad_logits' softmax as exp2(acc * log2(e)/T - lse * log2(e)): one FMA and one ex2 per logit (different
    # bits from exp(acc/T - lse), the same invariance), the target compared with a per-row column offset
    logits_exp2: bool = False
    logits_maxnreg: int = 0  # a register cap for grad_logits (0: none): two programs per multiprocessor need <= 128 at 8 warps
    # The lean plan (fused_plan.LEAN_ROW_CHUNK), buffer budgets; no bit depends on them. Its grad_hidden pass holds the
    # chunk's fp32 sum and partial (16 MiB each at 2048 rows; with one chunk also hidden's fp16 copy, T x H) and shares
    # what lean_bytes leaves between the [chunk, slice] grad_logits buffer and the weight slice's fp16 copy [slice, H]:
    # at T=8192 13 MiB each, 3328 columns (groups of 18992 in 6 equal slices), which the caching allocator holds as 14
    # (a 16 MiB block holding 15 MiB is not split: 3840 columns measured 64.66 MiB on the H200). Its grad_weight pass:
    # a [T, slice] buffer of lean_weight_g_bytes, 1792 columns at T=8192 (14 x 8 programs for 132 SMs), beside hidden's
    # fp16 copy (32 MiB).
    lean_bytes: int = 58 * 2**20
    lean_weight_g_bytes: int = 28 * 2**20

    def as_dict(self) -> dict:
        return asdict(self)


BACKWARD_CONFIG = BackwardConfig()
_G_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@triton.jit(do_not_specialize=["T", "v0", "width", "n_row_blocks"])
def _grad_logits_kernel(
    h_desc,
    w_desc,
    g_ptr,
    w_ptr,
    wc_ptr,
    tgt_ptr,
    lse_ptr,
    scale_ptr,
    T,
    H,
    v0,
    width,
    stride_g,
    stride_w,
    inv_temp,
    n_row_blocks,
    COPY_W: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_C: tl.constexpr,
    EXP2: tl.constexpr = False,
):
    """grad_logits[t, c] = (onehot - softmax)[t, v0 + c] * scale[t], one tile, where scale[t] is the mantissa of
    grad_out[t] / temperature times 2**g_exp; its exponent is applied in fp32 by the products (BackwardConfig.g_exp).

    With COPY_W, one more row of programs (program_id(0) == n_row_blocks) copies the tile's weight rows
    into the 16-bit buffer the grad_hidden product reads (zeros past the slice's end): no launch of its
    own, and it runs beside the GEMM tiles.
    """
    c0 = tl.program_id(1) * BLOCK_V
    if COPY_W and tl.program_id(0) == n_row_blocks:
        cs = c0 + tl.arange(0, BLOCK_V)
        ok = cs < width
        for k0 in range(0, H, BLOCK_C):
            ks = k0 + tl.arange(0, BLOCK_C)
            x = tl.load(w_ptr + (v0 + cs)[:, None].to(tl.int64) * stride_w + ks[None, :], mask=ok[:, None], other=0.0)
            tl.store(wc_ptr + cs[:, None].to(tl.int64) * H + ks[None, :], x.to(wc_ptr.dtype.element_ty))
    else:
        row0 = tl.program_id(0) * BLOCK_T
        rows = row0 + tl.arange(0, BLOCK_T)
        row_ok = rows < T
        acc = _tile_acc_tma(h_desc, w_desc, row0, v0 + c0, H // BLOCK_K, BLOCK_T, BLOCK_V, BLOCK_K, False)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        scale = tl.load(scale_ptr + rows, mask=row_ok, other=0.0)
        tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=-1)
        cols = c0 + tl.arange(0, BLOCK_V)
        if EXP2:
            grad = tl.exp2(acc * (inv_temp * 1.4426950408889634) - (lse * 1.4426950408889634)[:, None]) * -scale[:, None]
            t_col = tl.where((tgt >= v0) & (tgt < v0 + width), tgt - v0, -1).to(tl.int32)  # the slice's column, 32-bit
            grad = tl.where(cols[None, :] == t_col[:, None], grad + scale[:, None], grad)
        else:
            grad = tl.exp(acc * inv_temp - lse[:, None]) * -scale[:, None]
            grad = tl.where(cols[None, :] + v0 == tgt[:, None], grad + scale[:, None], grad)
        grad = tl.where(cols[None, :] < width, grad, 0.0)  # past the slice: zeros the products rely on
        ptrs = g_ptr + rows[:, None].to(tl.int64) * stride_g + cols[None, :]
        tl.store(ptrs, grad.to(g_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit(do_not_specialize=["T", "width"])
def _grad_weight_kernel(
    g_desc,
    h_desc,
    gw_ptr,
    factor_ptr,
    T,
    H,
    width,
    stride_gw,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
    H_FIRST: tl.constexpr = False,
):
    """grad_weight[c, :] for c in one tile of the slice: sum over T in blocks of BLOCK_K from row 0, times the
    power of two at factor_ptr (an exact fp32 multiply; _row_scales). H_FIRST: the grid is (H tiles, vocab tiles),
    so the programs running together share their grad_logits columns (no bit depends on it)."""
    c0 = tl.program_id(1 if H_FIRST else 0) * BLOCK_V
    h0 = tl.program_id(0 if H_FIRST else 1) * BLOCK_H
    acc = tl.zeros([BLOCK_V, BLOCK_H], tl.float32)
    for t0 in range(0, tl.cdiv(T, BLOCK_K) * BLOCK_K, BLOCK_K):
        acc = tl.dot(g_desc.load([t0, c0]).T, h_desc.load([t0, h0]), acc)
    acc = acc * tl.load(factor_ptr)
    cols = c0 + tl.arange(0, BLOCK_V)
    hs = h0 + tl.arange(0, BLOCK_H)
    ptrs = gw_ptr + cols[:, None].to(tl.int64) * stride_gw + hs[None, :]
    tl.store(ptrs, acc.to(gw_ptr.dtype.element_ty), mask=cols[:, None] < width)


@triton.jit(do_not_specialize=["T", "w_row0", "width", "g_col0"])
def _grad_hidden_kernel(
    g_desc,
    w_desc,
    p_ptr,
    rs_ptr,
    T,
    H,
    w_row0,
    width,
    g_col0,
    ACCUMULATE: tl.constexpr,
    SCALE_ROWS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
    H_FIRST: tl.constexpr = False,
    ADD_TO_SUM: tl.constexpr = False,
):
    """partial[rows, h-tile] (+)= grad_logits[rows, slice] @ weight[slice, h-tile]; K from the slice start.

    The accumulator resumes from the stored fp32 partial (an exact round trip), so a group's K loop is
    the same sequence of fp32 accumulations however the group is cut into slices: the slice width
    changes no bit of grad_hidden (checked by tests/operators/test_triton_kernel_interpreted.py).
    SCALE_ROWS (the group's last slice): the finished sum times each row's 2**(e - g_exp), the exponent of
    grad_out / temperature that grad_logits leaves out (an exact fp32 multiply), once per group whatever the slicing.
    g_col0: the slice's first column in g_desc (0 for a per-slice buffer; the keep plan's buffer spans the shard).
    Columns read past the slice meet zero weight rows.
    ADD_TO_SUM (the keep plan, a group's only slice): the finished, scaled group sum is added in fp32 to what
    p_ptr holds, the earlier groups' sum: the bits of a separate ``sum += partial`` (the scale is a power of two, so
    a fused multiply-add rounds once as the two steps do).
    """
    row0 = tl.program_id(1 if H_FIRST else 0) * BLOCK_T  # H_FIRST: grid (H tiles, row blocks), as in _grad_weight_kernel
    h0 = tl.program_id(0 if H_FIRST else 1) * BLOCK_H
    rows = row0 + tl.arange(0, BLOCK_T)
    ptrs = p_ptr + rows[:, None].to(tl.int64) * H + (h0 + tl.arange(0, BLOCK_H))[None, :]
    ok = rows[:, None] < T
    if ACCUMULATE:
        acc = tl.load(ptrs, mask=ok, other=0.0)
    else:
        acc = tl.zeros([BLOCK_T, BLOCK_H], tl.float32)
    for k0 in range(0, tl.cdiv(width, BLOCK_K) * BLOCK_K, BLOCK_K):
        acc = tl.dot(g_desc.load([row0, g_col0 + k0]), w_desc.load([w_row0 + k0, h0]), acc)
    if SCALE_ROWS:
        acc = acc * tl.load(rs_ptr + rows, mask=rows < T, other=0.0)[:, None]
    if ADD_TO_SUM:
        acc = tl.load(ptrs, mask=ok, other=0.0) + acc
    tl.store(ptrs, acc, mask=ok)


def _slice_width(cfg: BackwardConfig, rows: int, widest: int, itemsize: int) -> int:
    """Vocab columns per backward step: the most whose grad_logits buffer fits cfg.g_buffer_bytes; with
    even_slices, the widest group cut into equal slices of at most that many. No bit depends on it."""
    cols = cfg.slice_cols or cfg.g_buffer_bytes // (max(rows, 1) * itemsize) // cfg.block_v * cfg.block_v
    cols = max(cfg.block_v, min(cols, triton.cdiv(widest, cfg.block_v) * cfg.block_v))
    if cfg.even_slices and not cfg.slice_cols:
        cols = triton.cdiv(triton.cdiv(widest, triton.cdiv(widest, cols)), cfg.block_v) * cfg.block_v
    return cols


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2**exponent (an int32 tensor) as fp32, built from its bits: exact, no host sync; 0 below 2**-126."""
    return ((exponent + 127).clamp(0, 254).to(torch.int32) << 23).view(torch.float32)


def _row_scales(scale: torch.Tensor, g_exp: int):
    """grad_out / temperature per row (``scale``, fp32) split for the kernels, every piece exact (frexp and powers of two):

    - ``g_scale`` = m * 2**g_exp, where scale = m * 2**e, m in [1/2, 1): grad_logits' row factor, never small;
    - ``h_scale`` = 2**(e - g_exp): grad_hidden's row factor, applied in fp32 to each group's finished sum;
    - ``w_rows`` = 2**(e - E), E the exponent of max_t |scale| (so <= 1): each row of hidden's 16-bit copy for
      grad_weight, whose sum over rows cannot take a per-row factor after the product; a bf16 row times a power of
      two is exact in fp16 while it stays in fp16's range, so only a row whose grad_out is 2**-k of the largest
      loses bits, as 2**-k of the sum (rows with grad_out 0 get 0, not 2**(0 - E));
    - ``w_factor`` = 2**(E - g_exp) [1]: grad_weight's sum times it, in fp32.

    E is the same for every TP rank (all hold every row's grad_out) and every plan over the same rows, so
    grad_weight's bits do not depend on the split or the plan; grad_hidden's factors are per row (batch invariant).
    """
    m, e = torch.frexp(scale)
    top = torch.frexp(scale.abs().amax())[1]
    w_rows = torch.where(m != 0, _pow2(e - top), 0.0)
    return m * 2.0**g_exp, _pow2(e - g_exp), w_rows, _pow2(top - g_exp).reshape(1)


def _weight_operand(hidden, w_rows, g_dtype):
    """hidden's 16-bit copy with row t times w_rows[t] (_row_scales), in one elementwise launch: torch computes
    in fp32 and writes the 16-bit result, no fp32 [T, H] temporary."""
    hc = torch.empty(hidden.shape, dtype=g_dtype, device=hidden.device)
    torch.mul(hidden, w_rows[:, None], out=hc)
    return hc


class _SliceKernels:
    """The backward's operands, buffers and descriptors for one block of rows and one weight shard, and
    the three launches per vocab slice. The fast plan uses one over all T rows; the lean plan one per
    row chunk (grad_hidden) and one over all T rows (grad_weight). A kernel's tile over a given
    (row, vocab column) computes the same bits whichever rows the block starts at (row blocks of
    block_t from the block's first row; row chunks are multiples of block_t)."""

    def __init__(self, cfg, hidden, weight_shard, targets, lse, scale, temperature, slice_cols, wop=None, weight_grad=True, hidden_grad=True):
        from triton.tools.tensor_descriptor import TensorDescriptor

        self.cfg, self.rows, self.width = cfg, hidden.shape[0], hidden.shape[1]
        self.hidden, self.weight, self.tgt, self.lse = hidden, weight_shard, targets, lse
        self.g_scale, self.h_scale, w_rows, self.w_factor = _row_scales(scale, cfg.g_exp)
        self.inv_temp = 1.0 / temperature
        g_dtype = _G_DTYPES[cfg.g_dtype]
        dev = hidden.device
        self.g_buf = torch.empty(self.rows, slice_cols, dtype=g_dtype, device=dev)
        bt, bv, bk = cfg.block_t, cfg.block_v, cfg.block_k
        self.h_desc = TensorDescriptor.from_tensor(hidden, [bt, bk])
        lv, hh = cfg.logits_block_v, cfg.hidden_block_h
        self.w_desc = TensorDescriptor.from_tensor(weight_shard, [lv, bk])
        self.weight_grad, self.hidden_grad = weight_grad, hidden_grad
        if weight_grad:  # grad_weight: K(rows) x vocab tile of grad_logits, times the scaled 16-bit hidden
            hc = wop if wop is not None else _weight_operand(hidden, w_rows, g_dtype)
            self.g_load_w = TensorDescriptor.from_tensor(self.g_buf, [bk, bt])
            self.hc_desc = TensorDescriptor.from_tensor(hc, [bk, bv])
        self.copy = hidden_grad and g_dtype != weight_shard.dtype
        if hidden_grad:
            self.g_load_t = TensorDescriptor.from_tensor(self.g_buf, [bt, bk])  # grad_hidden: rows x K
            if not self.copy:
                self.wc_buf, self.wc_desc = weight_shard, TensorDescriptor.from_tensor(weight_shard, [bk, hh])
            else:  # one slice of the weight in the buffer's dtype; rows past a short slice are zeros (or meet zero grad_logits)
                self.wc_buf = torch.zeros(slice_cols, self.width, dtype=g_dtype, device=dev)
                self.wc_desc = TensorDescriptor.from_tensor(self.wc_buf, [bk, hh])
        else:
            self.wc_buf = self.g_buf  # unused: no copy is made
        self.in_logits = self.copy and cfg.copy_in_logits
        self.n_row_blocks = triton.cdiv(self.rows, bt)

    def slice(self, s0, n, grad_w_rows, partial, accumulate, last=True):
        """grad_logits of vocab columns [s0, s0 + n) for this block's rows; then the slice's grad_weight rows
        (``grad_w_rows``, when this block computes them) and ``partial`` (+)= grad_logits @ weight slice,
        scaled per row when ``last`` (the group's last slice)."""
        cfg, rows, width = self.cfg, self.rows, self.width
        bt, bv, bk = cfg.block_t, cfg.block_v, cfg.block_k
        lv, hh = cfg.logits_block_v, cfg.hidden_block_h
        _grad_logits_kernel[(self.n_row_blocks + self.in_logits, triton.cdiv(n, lv))](
            self.h_desc,
            self.w_desc,
            self.g_buf,
            self.weight,
            self.wc_buf,
            self.tgt,
            self.lse,
            self.g_scale,
            rows,
            width,
            s0,
            n,
            self.g_buf.stride(0),
            self.weight.stride(0),
            self.inv_temp,
            self.n_row_blocks,
            COPY_W=self.in_logits,
            BLOCK_T=bt,
            BLOCK_V=lv,
            BLOCK_K=bk,
            BLOCK_C=64,
            EXP2=cfg.logits_exp2,
            num_warps=cfg.logits_warps,
            num_stages=cfg.logits_stages,
            **({"maxnreg": cfg.logits_maxnreg} if cfg.logits_maxnreg else {}),
        )
        if grad_w_rows is not None:
            _grad_weight_kernel[(triton.cdiv(n, bt), width // bv)](
                self.g_load_w,
                self.hc_desc,
                grad_w_rows,
                self.w_factor,
                rows,
                width,
                n,
                grad_w_rows.stride(0),
                BLOCK_V=bt,
                BLOCK_H=bv,
                BLOCK_K=bk,
                num_warps=cfg.num_warps,
                num_stages=cfg.num_stages,
            )
        if partial is None:
            return
        if self.copy and not self.in_logits:
            self.wc_buf[:n].copy_(self.weight[s0 : s0 + n])
        _grad_hidden_kernel[(self.n_row_blocks, width // hh)](
            self.g_load_t,
            self.wc_desc,
            partial,
            self.h_scale,
            rows,
            width,
            0 if self.copy else s0,
            n,
            0,
            ACCUMULATE=accumulate,
            SCALE_ROWS=last,
            BLOCK_T=bt,
            BLOCK_H=hh,
            BLOCK_K=bk,
            num_warps=cfg.hidden_warps,
            num_stages=cfg.hidden_stages,
        )


def _check_backward_config(cfg: BackwardConfig, width: int) -> None:
    if width % cfg.block_k or width % cfg.block_v or width % cfg.hidden_block_h:
        raise ValueError(f"fused backward needs H divisible by {max(cfg.block_v, cfg.hidden_block_h)}; got H={width}")
    if cfg.block_v % cfg.logits_block_v or (cfg.slice_cols and cfg.slice_cols % cfg.block_v):
        raise ValueError(f"backward config: slices are multiples of block_v={cfg.block_v}, which logits_block_v must divide")


def triton_backward_groups(
    hidden,
    weight_shard,
    targets,
    lse,
    temperature,
    grad_out,
    local_group_bounds,
    grad_w,
    config: BackwardConfig | None = None,
    into=None,
    start_sum: bool = True,
):
    """Yield each local group's grad_hidden partial ([T, H] fp32), writing grad_weight rows as it goes.

    The GPU twin of fused_torch.torch_backward_groups (same plan, fused_plan.py). With ``into`` (a
    [T, H] fp32 tensor) each group is folded into ``into`` in group order instead (the first group
    accumulated in it directly when ``start_sum``, later ones added), the additions of
    fused_plan.sum_group_partials, and None is yielded per group. Extra memory: one [T, slice] 16-bit
    grad_logits buffer, the group partial, a 16-bit copy of hidden with its rows scaled for grad_weight
    (_row_scales), and (fp16 buffers) an fp16 copy of the current weight slice.
    """
    cfg = config or BACKWARD_CONFIG
    rows, width = hidden.shape
    _check_backward_config(cfg, width)
    hidden = hidden.contiguous()
    weight_shard = weight_shard.contiguous()
    dev = hidden.device
    spans = list(zip(local_group_bounds[:-1], local_group_bounds[1:]))
    slice_cols = _slice_width(cfg, rows, max(b - a for a, b in spans), _G_DTYPES[cfg.g_dtype].itemsize)
    scale = (grad_out.float() * (1.0 / temperature)).contiguous()
    k = _SliceKernels(cfg, hidden, weight_shard, targets.contiguous(), lse.contiguous(), scale, temperature, slice_cols)
    reused = None if into is None else torch.empty(rows, width, dtype=torch.float32, device=dev)
    for gi, (g0, g1) in enumerate(spans):
        direct = into is not None and start_sum and gi == 0  # total = partial_0: accumulate in place
        if direct:
            partial = into
        else:  # a fresh one when the caller keeps each partial, else one buffer for every group
            partial = reused if reused is not None else torch.empty(rows, width, dtype=torch.float32, device=dev)
        for s0 in range(g0, g1, slice_cols):
            n = min(slice_cols, g1 - s0)
            k.slice(s0, n, grad_w[s0 : s0 + n], partial, accumulate=s0 != g0, last=s0 + n == g1)
        if into is None:
            yield partial
            continue
        if not direct:
            into += partial  # fused_plan.sum_group_partials' left-to-right adds
        yield None


def triton_backward_lean(hidden, shards, lse, temperature, grad_out, grad_h, row_chunk: int, config: BackwardConfig | None = None) -> None:
    """The lean plan (fused_plan.py): grad_hidden in fixed row chunks, grad_weight in a pass of its own.

    ``shards``: (weight_shard, shard-local targets, local group bounds, grad_w rows) per TP rank, in rank
    order (one for TP=1). ``grad_h`` [T, H] (any float dtype) receives grad_hidden. Pass 1, per chunk of
    ``row_chunk`` rows from row 0: every rank's groups in order, each group's partial accumulated slice by
    slice and added to the chunk's running sum (the first group accumulated in it directly): per row, the
    additions of the fast plan, so the same bits. Pass 2, per vocab slice: grad_logits over all T rows and
    grad_weight = grad_logits^T @ hidden, the fast plan's kernel and reduction order (when T fits one
    chunk, pass 1 does this as the fast plan does, since its grad_logits cover every row). Extra memory at
    T=8192, H=2048: pass 1 the chunk's sum and partial (2 x 16 MiB), a [chunk, slice] fp16 buffer and the weight
    slice's fp16 copy (13 MiB each at 3328 columns; see BackwardConfig.lean_bytes); pass 2 hidden's fp16 copy (32
    MiB) and a [T, slice] fp16 buffer of at most cfg.lean_weight_g_bytes.
    """
    cfg = config or BACKWARD_CONFIG
    rows, width = hidden.shape
    _check_backward_config(cfg, width)
    if row_chunk <= 0 or row_chunk % cfg.block_t:
        raise ValueError(f"lean backward: row_chunk={row_chunk} must be a positive multiple of block_t={cfg.block_t}")
    hidden = hidden.contiguous()
    dev = hidden.device
    itemsize = _G_DTYPES[cfg.g_dtype].itemsize
    shards = [(w.contiguous(), t.contiguous(), bounds, gw) for w, t, bounds, gw in shards]
    widest = max(b - a for _, _, bounds, _ in shards for a, b in zip(bounds[:-1], bounds[1:]))
    chunk_rows = min(rows, row_chunk)
    one_chunk = rows <= row_chunk
    # the two 16-bit buffers share what the fp32 sum and partial (and, with one chunk, hidden's fp16 copy) leave;
    # the wider of the two ([chunk, slice] or [slice, H]) sets the slice's width
    fixed = 2 * chunk_rows * width * 4 + (rows * width * itemsize if one_chunk else 0)
    share = max(cfg.lean_bytes - fixed, 0) // 2
    slice_cols = _slice_width(replace(cfg, g_buffer_bytes=share), max(chunk_rows, width), widest, itemsize)
    scale = (grad_out.float() * (1.0 / temperature)).contiguous()
    lse = lse.contiguous()
    total = torch.empty(chunk_rows, width, dtype=torch.float32, device=dev)
    partial = torch.empty(chunk_rows, width, dtype=torch.float32, device=dev)
    for r0 in range(0, rows, row_chunk):
        r1 = min(rows, r0 + row_chunk)
        tot, part = total[: r1 - r0], partial[: r1 - r0]
        first = True
        for weight_shard, tgt, bounds, grad_w in shards:
            k = _SliceKernels(cfg, hidden[r0:r1], weight_shard, tgt[r0:r1], lse[r0:r1], scale[r0:r1], temperature, slice_cols, weight_grad=one_chunk)
            for g0, g1 in zip(bounds[:-1], bounds[1:]):
                acc = tot if first else part
                for s0 in range(g0, g1, slice_cols):
                    n = min(slice_cols, g1 - s0)
                    k.slice(s0, n, grad_w[s0 : s0 + n] if one_chunk else None, acc, accumulate=s0 != g0, last=s0 + n == g1)
                if not first:
                    tot += part  # fused_plan.sum_group_partials' left-to-right adds, row by row
                first = False
            del k
        grad_h[r0:r1].copy_(tot)
    del total, partial, tot, part, acc  # every view too: pass 2's buffers take their memory
    if one_chunk:
        return
    wop = _weight_operand(hidden, _row_scales(scale, cfg.g_exp)[2], _G_DTYPES[cfg.g_dtype])  # the fast plan's operand: the same bits
    w_cols = _slice_width(replace(cfg, g_buffer_bytes=cfg.lean_weight_g_bytes), rows, widest, itemsize)
    for weight_shard, tgt, bounds, grad_w in shards:
        k = _SliceKernels(cfg, hidden, weight_shard, tgt, lse, scale, temperature, w_cols, wop=wop, hidden_grad=False)
        for g0, g1 in zip(bounds[:-1], bounds[1:]):
            for s0 in range(g0, g1, w_cols):
                n = min(w_cols, g1 - s0)
                k.slice(s0, n, grad_w[s0 : s0 + n], None, accumulate=False)
        del k  # one [T, slice] buffer at a time, also under an emulated TP split
