"""The engine side of the levers: vLLM settings, the registered norm implementation one of them
selects, and the sampler's reference filter. Installed in whichever process runs the engine
(colocate: the trainer; TP=2: the spawned engine core; non-colocate: the server's processes through
engine_site/sitecustomize.py); the reference filter needs the sampler in the trainer's process.

``apply_in_process(model)`` sets the same switches on a live in-process engine, between forward
passes, as the settings would set them at its start (the drift budget's re-scorer): the custom ops'
dispatch (what ``custom_ops=["none"]`` picks at construction), the fused add + norm's priority, the
split-KV variable and the filter.
"""

from __future__ import annotations

import json
import os

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


# ---------------------------------------------------------------- the sampler's reference filter
def _reference_masked(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """vLLM's apply_top_k_top_p result (logits, -inf outside the kept set) with the kept set from the
    trainer's replay mask, row by row (each row may carry its own k and p)."""
    from harness.embedded import logprobs as lp

    out = logits.clone()
    for row in range(logits.shape[0]):
        top_k = int(k[row]) if k is not None else -1
        top_p = float(p[row]) if p is not None else 1.0
        keep = lp.processed_mask(logits[row : row + 1].float(), top_k, top_p)[0]
        out[row].masked_fill_(~keep, float("-inf"))
    return out


def _reference_log_softmax(original):
    def forward(self, logits, generators, k, p):
        if self.logprobs_mode != "processed_logprobs" or not lever_on("engine-reference-log-softmax"):
            return original(self, logits, generators, k, p)
        from vllm.v1.sample.ops import topk_topp_sampler as sampler_ops

        reference = sampler_ops.apply_top_k_top_p(logits.clone(), k, p).log_softmax(dim=-1, dtype=torch.float32)
        sampled, _ = original(self, logits, generators, k, p)
        return sampled, reference

    forward._embedded_lever = True
    return forward


def install_reference_log_softmax() -> None:
    """Wrap the sampler's forwards (idempotent; before the engine binds its sampler, after any
    numerical control on them): with ``engine-reference-log-softmax`` on, the log-probs it returns are
    the reference log-softmax of its filtered logits; the sampled tokens are the sampler's own."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    for name in ("forward_cpu", "forward_native"):
        if not getattr(getattr(TopKTopPSampler, name), "_embedded_lever", False):
            setattr(TopKTopPSampler, name, _reference_log_softmax(getattr(TopKTopPSampler, name)))


def install_sampler_references() -> None:
    install_reference_filter()
    install_reference_log_softmax()


def install_reference_filter() -> None:
    """Wrap vLLM's top-k/top-p masking (idempotent): with ``engine-reference-filter`` on, the kept
    set comes from the reference mask; off, from whatever was there (vLLM's, or a control's)."""
    from vllm.v1.sample.ops import topk_topp_sampler as sampler_ops

    if getattr(sampler_ops.apply_top_k_top_p, "_embedded_lever", False):
        return
    original = sampler_ops.apply_top_k_top_p

    def apply_top_k_top_p(logits, k, p):
        if (k is None and p is None) or not lever_on("engine-reference-filter"):
            return original(logits, k, p)
        return _reference_masked(logits, k, p)

    apply_top_k_top_p._embedded_lever = True
    sampler_ops.apply_top_k_top_p = apply_top_k_top_p


# ---------------------------------------------------------------- switched on a live engine
_DISPATCHED = "_embedded_dispatched_forward"


def apply_in_process(model) -> None:
    """The engine-side switches as they stand now (true_on_policy.configure), set on a live
    in-process engine's model: what each setting would have made of it at its start."""
    from vllm.ir.ops import layernorm
    from vllm.model_executor.custom_op import CustomOp

    native = lever_on("engine-native-ops")
    for module in model.modules():
        if isinstance(module, CustomOp):
            first = module.__dict__.setdefault(_DISPATCHED, module._forward_method)
            module._forward_method = module.forward_native if native else first
    register_rounded_residual_norm()
    op = layernorm.fused_add_rms_norm
    if not hasattr(op, "_embedded_default_priority"):
        op._embedded_default_priority = op.get_priority() or ["native"]
    op.set_default([ROUNDED_RESIDUAL, "native"] if lever_on("engine-rounded-residual") else op._embedded_default_priority)
    if lever_on("engine-split-kv-off"):
        os.environ["VLLM_CPU_ATTN_SPLIT_KV"] = "0"
    else:
        os.environ.pop("VLLM_CPU_ATTN_SPLIT_KV", None)
    install_sampler_references()
