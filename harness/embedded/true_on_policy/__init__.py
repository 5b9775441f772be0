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

# Each lever by name, with the boundary it aligns; --embedded-true-on-policy-without NAME[,NAME]
# switches single levers off (the controls that show each at its own boundary).
LEVERS = {
    "engine-native-ops": "engine: compilation_config.custom_ops=['none'] (vLLM's native torch ops; rotary first)",
    "engine-split-kv-off": "engine: VLLM_CPU_ATTN_SPLIT_KV=0 (decode attention as prefill)",
    "engine-rounded-residual": "engine: ir_op_priority.fused_add_rms_norm=['embedded_rounded_residual'] (residual rounded before the norm)",
    "trainer-engine-norm": "trainer: EngineRMSNorm for every norm (vLLM's formula, weights in the model dtype)",
    "trainer-engine-attention": "trainer: EngineKernelAttention (vLLM's CPU attention kernel; Megatron's torch-math backward)",
    "trainer-engine-log-softmax": "trainer: log-softmax as vLLM's sampler computes it",
}
_off: frozenset[str] = frozenset()


def configure(without: frozenset[str] | set[str]) -> None:
    """The levers switched off in this process (the trainer's; the engine's settings follow from it)."""
    global _off
    unknown = set(without) - set(LEVERS)
    if unknown:
        raise ValueError(f"unknown true-on-policy lever(s) {sorted(unknown)}; known: {sorted(LEVERS)}")
    _off = frozenset(without)


def lever_on(name: str) -> bool:
    if name not in LEVERS:
        raise KeyError(name)
    return name not in _off


def record(without) -> dict:
    """What the run record says about the mode: each lever with on/off."""
    return {name: {"on": name not in set(without), "what": what} for name, what in LEVERS.items()}


def install_from_env() -> None:
    """Called at import by modules that a spawned engine process re-imports (like fp8's)."""
    if os.environ.get(ENV_FLAG) == "1":
        from harness.embedded.true_on_policy.engine_settings import register_rounded_residual_norm

        register_rounded_residual_norm()
