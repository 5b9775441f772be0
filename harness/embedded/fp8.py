"""FP8 (e4m3) rollout, emulated on CPU where vLLM has no fp8 kernels.

What is emulated, applied to what the engine computes with:
- weights of every attention/MLP linear layer (q, k, v, o, gate, up, down): rounded to e4m3 in
  128x128 blocks with one fp32 scale per block (amax / 448), then dequantized to the engine dtype
  before they are loaded (embeddings, LM head and norms stay unquantized, as in vLLM's fp8);
- activations entering those layers: rounded to e4m3 in 1x128 groups along the hidden dimension
  (one scale per token per group; a dimension smaller than 128 is one group), by wrapping vLLM's
  ``UnquantizedLinearMethod.apply`` inside the engine process.
The GEMM itself then runs in the engine dtype: accumulation differs from a real fp8 GEMM.

A numerical control (``--embedded-inject rollout-fp8-weight-scale:F``, harness/embedded/numeric_faults.py)
reads the quantised weights back with F x their block's scale (``set_weight_scale_factor``); by
default F is 1 and the weights are read back with their own scale, as always.
"""

from __future__ import annotations

import os
import sys

import torch

E4M3_MAX = 448.0
BLOCK = 128
ENV_FLAG = "EMBEDDED_FP8_ACTIVATIONS"
ANNOUNCEMENT = "embedded fp8: activation emulation active in pid"
_weight_scale_factor = 1.0  # the wrong-scale control's F (set_weight_scale_factor); 1.0: no control
_weight_mantissa_bits: int | None = None  # the weight-bits control's N (set_weight_mantissa_bits); None: e4m3's own
QUANTIZED_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

EMULATION_NOTE = (
    "vllm-quantization fp8 is EMULATED on CPU: e4m3 round-trip of linear-layer weights in 128x128 "
    "blocks (per-block fp32 scale) and of their input activations in 1x128 per-token groups; "
    "embeddings, LM head and norms unquantized; GEMMs run in the engine dtype."
)


def _round_e4m3(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    scaled = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX)
    return scaled.to(torch.float8_e4m3fn).float() * scale


def set_weight_scale_factor(factor: float) -> None:
    """The wrong-fp8-scale control: every later ``quantize_weight_blockwise`` reads its blocks back
    with ``factor`` x their scale (1.0: their own scale, no control). Set in the trainer's process,
    which quantises the weights it sends to the engine."""
    global _weight_scale_factor
    if not factor > 0:
        raise ValueError(f"factor={factor}: expected a positive scale factor")
    _weight_scale_factor = float(factor)


def _round_to_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to `bits` explicit mantissa bits, to nearest with ties to even (exponent kept)."""
    mantissa, exponent = torch.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    steps = 2.0 ** (bits + 1)
    return torch.ldexp(torch.round(mantissa * steps) / steps, exponent)


def set_weight_mantissa_bits(bits: int | None) -> None:
    """The weight-bits control: every later ``quantize_weight_blockwise`` rounds its e4m3 values to
    ``bits`` mantissa bits (fewer than e4m3's 3) in the block's scaled domain; None: no control."""
    global _weight_mantissa_bits
    if bits is not None and not 1 <= bits < 3:
        raise ValueError(f"bits={bits}: expected 1 or 2 mantissa bits (e4m3 has 3)")
    _weight_mantissa_bits = bits


def quantize_weight_blockwise(w: torch.Tensor) -> torch.Tensor:
    """e4m3 round trip with one scale per 128x128 block (edges: partial blocks); read back with
    the wrong-scale control's factor x the scale when one is set, and its values rounded to the
    weight-bits control's mantissa bits when that is set."""
    rows, cols = w.shape
    pr, pc = -rows % BLOCK, -cols % BLOCK
    padded = torch.nn.functional.pad(w.float(), (0, pc, 0, pr))
    blocks = padded.view(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    deq = _round_e4m3(blocks, amax / E4M3_MAX)
    if _weight_mantissa_bits is not None:  # the e4m3 values (scaled domain) with fewer mantissa bits
        scale = amax / E4M3_MAX
        deq = _round_to_bits(deq / scale, _weight_mantissa_bits) * scale
    if _weight_scale_factor != 1.0:  # quantised with the block's scale, read back with F x it
        deq = deq * _weight_scale_factor
    return deq.view_as(padded)[:rows, :cols].to(w.dtype)


def quantize_activation_groups(x: torch.Tensor) -> torch.Tensor:
    """e4m3 round trip with one scale per token per 128 hidden elements."""
    hidden = x.shape[-1]
    group = min(BLOCK, hidden)
    pad = -hidden % group
    flat = torch.nn.functional.pad(x.float(), (0, pad)).view(*x.shape[:-1], -1, group)
    amax = flat.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    deq = _round_e4m3(flat, amax / E4M3_MAX).view(*x.shape[:-1], -1)
    return deq[..., :hidden].to(x.dtype)


def quantize_state_dict(hf_sd: dict) -> dict:
    return {k: (quantize_weight_blockwise(v) if any(n in k for n in QUANTIZED_WEIGHTS) and v.dim() == 2 else v) for k, v in hf_sd.items()}


def install_activation_emulation() -> None:
    """Wrap vLLM's unquantized linear apply (idempotent). Runs in whichever process hosts the engine."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    if getattr(UnquantizedLinearMethod.apply, "_embedded_fp8", False):
        return
    original = UnquantizedLinearMethod.apply

    def apply(self, layer, x, bias=None):
        if not apply._announced:  # once per process: proof the emulation runs where the engine computes
            apply._announced = True
            print(f"{ANNOUNCEMENT} {os.getpid()}", file=sys.stderr, flush=True)
        return original(self, layer, quantize_activation_groups(x), bias)

    apply._announced = False

    apply._embedded_fp8 = True
    UnquantizedLinearMethod.apply = apply


def install_from_env() -> None:
    """Called at import by modules that a spawned engine process re-imports."""
    if os.environ.get(ENV_FLAG) == "1":
        install_activation_emulation()
