"""The engine side of true on-policy: vLLM settings, plus the one registered norm implementation
they select. Installed in whichever process runs the engine (colocate: the trainer; TP=2: the
spawned engine core; non-colocate: the server's processes through engine_site/sitecustomize.py).
"""

from __future__ import annotations

import json

import torch

from harness.embedded import operator_calls
from harness.embedded.true_on_policy import lever_on

ROUNDED_RESIDUAL = "embedded_rounded_residual"
# vLLM's CPU default KV block size; the trainer's kernel call uses the same blocks.
BLOCK_SIZE = 128


def rounded_residual_fused_add_rms_norm(
    x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's native fused add + RMSNorm, except that the norm reads the residual sum after it is
    rounded to the model dtype: Megatron adds the residual in the model dtype, then normalises."""
    # Counted in the engine's process: the proof that vLLM selected this implementation (operator_calls.py)
    operator_calls.count(operator_calls.ROLLOUT, operator_calls.ENGINE_NORM, ROUNDED_RESIDUAL, x.reshape(-1, x.shape[-1]).shape[0])
    orig_dtype = x.dtype
    x_residual = (x.to(torch.float32) + x_residual.to(torch.float32)).to(orig_dtype)
    x = x_residual.to(torch.float32)
    x_var = x if variance_size is None else x[..., :variance_size]
    variance = x_var.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + epsilon)
    if weight is not None:
        x = x.to(weight.dtype) * weight
    return x.to(orig_dtype), x_residual


def register_rounded_residual_norm() -> None:
    """Register the implementation with vLLM's IR op (idempotent); the engine selects it by setting."""
    from vllm.ir.ops import layernorm

    op = layernorm.fused_add_rms_norm
    if ROUNDED_RESIDUAL not in op.impls:
        op.register_impl(ROUNDED_RESIDUAL, supported=True)(rounded_residual_fused_add_rms_norm)


def env() -> dict[str, str]:
    """Environment of the engine's processes."""
    return {"VLLM_CPU_ATTN_SPLIT_KV": "0"} if lever_on("engine-split-kv-off") else {}


def _compilation() -> dict:
    return {"custom_ops": ["none"]} if lever_on("engine-native-ops") else {}


def _ir_op_priority() -> dict:
    return {"fused_add_rms_norm": [ROUNDED_RESIDUAL]} if lever_on("engine-rounded-residual") else {}


def llm_kwargs() -> dict:
    """Keyword arguments for ``vllm.LLM`` (besides enforce_eager, which the engine always sets: inductor
    compilation left 36% of tokens unequal)."""
    kwargs: dict = {"block_size": BLOCK_SIZE}
    if _compilation():
        kwargs["compilation_config"] = _compilation()
    if _ir_op_priority():
        kwargs["ir_op_priority"] = _ir_op_priority()
    return kwargs


def server_args() -> list[str]:
    """The same settings as the OpenAI server's command-line flags (it is started with --enforce-eager)."""
    args = ["--block-size", str(BLOCK_SIZE)]
    if _compilation():
        args += ["--compilation-config", json.dumps(_compilation())]
    if _ir_op_priority():
        args += ["--ir-op-priority", json.dumps(_ir_op_priority())]
    return args
