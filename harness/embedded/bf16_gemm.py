"""The trainer's bf16 GEMMs on a CPU without a native bf16 GEMM: fp32 arithmetic on the exact bf16 operands.

PyTorch runs a CPU bf16 matmul through oneDNN only where oneDNN reports bf16 support (AVX-512
and up; ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``). On an AVX2-only CPU
(../shared/facts/machines.md) ATen falls back to a scalar loop: the tiny model's 1280x64 @ 64x192
takes 4.1 ms there against 0.05 ms through oneDNN and 0.22 ms as an fp32 GEMM (one thread,
measured on the Intel Xeon with oneDNN's bf16 path switched off; docs/results.md). That loop made
the trainer's step 8x slower and a bf16 rung's whole step about 3x an fp32 one's.

Every operand of a bf16 GEMM is a bf16 value, and the product of two bf16 values is exact in fp32
(8 + 8 significant bits fit in 24). So the fp32 GEMM of the same operands, rounded once to bf16, is
the arithmetic both the fallback and oneDNN do (exact products, fp32 accumulation, one rounding),
summed in another order. The precision the experiment declares for the trainer (bf16 operands and
outputs, fp32 accumulation, as on the GPU) is unchanged; only which kernel adds the products is.

Not used for a true on-policy run: its contract is the same kernel on both sides, and the
engine's linears there run PyTorch's own bf16 GEMM (vLLM's oneDNN linear cannot be created
without bf16 support and falls back to ``torch.nn.functional.linear``).
Where oneDNN has bf16 (every AVX-512 machine), nothing changes.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The GEMMs Megatron's linear layers, core attention and LM head reach, forward and backward.
_GEMMS = frozenset(
    {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.baddbmm.default,
    }
)

NATIVE = "native"  # PyTorch's own bf16 GEMM (oneDNN where the CPU has bf16)
FP32_ACCUMULATED = "fp32-accumulated"  # this module's route


def native_bf16_gemm() -> bool:
    """Whether PyTorch runs a CPU bf16 GEMM through oneDNN here (else its scalar fallback)."""
    return bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def route(*, bf16: bool, true_on_policy: bool) -> str:
    """The route the trainer's GEMMs take on this machine (recorded with the run)."""
    if not bf16 or true_on_policy or native_bf16_gemm():
        return NATIVE
    return FP32_ACCUMULATED


class _Fp32AccumulatedGemm(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _GEMMS and _all_bf16_cpu(args):
            upcast = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
            return func(*upcast, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def _all_bf16_cpu(args) -> bool:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in tensors)


def context(gemm_route: str):
    """A context in which the trainer's forward or backward runs its GEMMs by ``gemm_route``."""
    return _Fp32AccumulatedGemm() if gemm_route == FP32_ACCUMULATED else contextlib.nullcontext()
