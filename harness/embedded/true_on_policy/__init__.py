"""True on-policy mode (``--embedded-true-on-policy``): the trainer's log-probs equal the engine's, bit for bit.

Each lever removes one boundary where the two stacks computed differently (measured on this
stack; docs/true-on-policy.md has the boundary table):

engine side (``engine_settings``), as vLLM settings in whichever process runs the engine:
- ``compilation_config.custom_ops = ["none"]``: vLLM's native torch implementations instead of its
  C++ ops (rotary was the first differing boundary);
- ``enforce_eager``: no inductor compilation (it fuses and reorders the native ops);
- ``VLLM_CPU_ATTN_SPLIT_KV=0``: with few running sequences the CPU attention kernel splits the KV
  loop across threads and decode stops matching prefill;
- ``ir_op_priority.fused_add_rms_norm = [embedded_rounded_residual]``: a registered implementation
  of vLLM's fused add + RMSNorm that rounds the residual sum to the model dtype before normalising
  it, as Megatron's separate residual add does (vLLM normalises the unrounded fp32 sum).

trainer side (``layer_spec``, ``logprobs``), as modules in Megatron's layer spec:
- ``EngineRMSNorm``: every RMSNorm (input, pre-MLP, q/k, final) in vLLM's formula with its weight
  in the model dtype (Megatron's torch norm keeps fp32 weights and rounds once);
- ``EngineKernelAttention``: core attention through vLLM's own CPU attention kernel, with
  Megatron's torch-math attention as its backward;
- the selected-token log-prob as vLLM's sampler computes it (fp32 logits divided in place by a
  temperature tensor, ``log_softmax(dtype=float32)``), with the processed-logprob replay if asked.
"""

from __future__ import annotations

import os

ENV_FLAG = "EMBEDDED_TRUE_ON_POLICY"

LEVERS = {
    "engine": [
        "compilation_config.custom_ops=['none'] (native torch ops)",
        "enforce_eager=True",
        "VLLM_CPU_ATTN_SPLIT_KV=0",
        "ir_op_priority.fused_add_rms_norm=['embedded_rounded_residual'] (residual sum rounded to the model dtype before the norm)",
    ],
    "trainer": [
        "EngineRMSNorm for every norm (vLLM's formula, weights in the model dtype)",
        "EngineKernelAttention (vLLM's CPU attention kernel forward, Megatron's torch-math attention backward)",
        "log-softmax as vLLM's sampler computes it",
    ],
}


def install_from_env() -> None:
    """Called at import by modules that a spawned engine process re-imports (like fp8's)."""
    if os.environ.get(ENV_FLAG) == "1":
        from harness.embedded.true_on_policy.engine_settings import register_rounded_residual_norm

        register_rounded_residual_norm()
