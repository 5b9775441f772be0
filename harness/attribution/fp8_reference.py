"""A reference FP8 e4m3 quantiser written from the format's definition, for the boundary table's
envelope: the engine's emulation (harness/embedded/fp8.py, torch's float8_e4m3fn cast) is what the
table judges, so its envelope must not be computed by the same code (a bug shared with it would be
invisible).

e4m3 (OCP FP8, the "fn" variant vLLM uses): 1 sign bit, 4 exponent bits with bias 7, 3 mantissa
bits; normal values (1 + m/8) * 2^e for e in -6..8, subnormals (m/8) * 2^-6, largest finite 448 =
1.75 * 2^8 (the all-ones pattern is NaN, there is no infinity). Rounding is to nearest, ties to an
even mantissa; a value beyond 448 saturates to 448, as the engine clamps before it casts.

Scales, as the rollout's fp8 recipe defines them (vLLM's block-wise fp8): weights in 128 x 128
blocks and activations in 1 x 128 groups along the hidden dimension (per token), each with one fp32
scale amax / 448; the value stored is round_e4m3(x / scale) and read back as that times the scale.
Numpy throughout: no torch fp8 dtype is involved.
"""

from __future__ import annotations

import numpy as np
import torch

MANTISSA_BITS = 3
MIN_NORMAL_EXPONENT = -6
MAX_EXPONENT = 8
E4M3_MAX = (2 - 2 ** -(MANTISSA_BITS - 1)) * 2.0**MAX_EXPONENT  # 1.75 * 256 = 448
BLOCK = 128
MIN_SCALE = 1e-12  # an all-zero block: any positive scale reads back zeros


def round_e4m3(y: np.ndarray) -> np.ndarray:
    """The nearest e4m3 value to each element (ties to even), saturating at +-448."""
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    # frexp: a = f * 2**k with f in [0.5, 1), so floor(log2 a) = k - 1 exactly (no log2 rounding)
    _, k = np.frexp(np.where(a > 0, a, 1.0))
    exponent = np.clip(k - 1, MIN_NORMAL_EXPONENT, MAX_EXPONENT)  # below 2^-6: the subnormal spacing
    quantum = np.ldexp(1.0, exponent - MANTISSA_BITS)
    # a / quantum is exact (a power of two); rint rounds half to even, i.e. to an even mantissa
    q = np.minimum(np.rint(a / quantum) * quantum, E4M3_MAX)
    return np.copysign(q, y)


def _round_trip(blocks: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    amax = np.abs(blocks).max(axis=axes, keepdims=True)
    scale = np.maximum(amax.astype(np.float32) / np.float32(E4M3_MAX), np.float32(MIN_SCALE))  # one fp32 scale a block
    scaled = (blocks.astype(np.float32) / scale).astype(np.float64)
    return round_e4m3(scaled) * scale.astype(np.float64)


def quantize_weight_blockwise(w: torch.Tensor) -> torch.Tensor:
    """A weight [out, in] through e4m3 in 128 x 128 blocks (partial blocks at the edges), read back."""
    x = w.detach().double().cpu().numpy()
    rows, cols = x.shape
    padded = np.pad(x, ((0, -rows % BLOCK), (0, -cols % BLOCK)))
    blocks = padded.reshape(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK)
    out = _round_trip(blocks, (1, 3)).reshape(padded.shape)[:rows, :cols]
    return torch.from_numpy(np.ascontiguousarray(out)).to(w.dtype)


def quantize_activation_groups(x: torch.Tensor) -> torch.Tensor:
    """Activations [..., hidden] through e4m3 in per-token groups of 128 (one group when hidden < 128), read back."""
    a = x.detach().double().cpu().numpy()
    hidden = a.shape[-1]
    group = min(BLOCK, hidden)
    padded = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, -hidden % group)])
    grouped = padded.reshape(*a.shape[:-1], -1, group)
    out = _round_trip(grouped, (-1,)).reshape(padded.shape)[..., :hidden]
    return torch.from_numpy(np.ascontiguousarray(out)).to(x.dtype)
