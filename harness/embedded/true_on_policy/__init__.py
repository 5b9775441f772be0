"""Levers: switches that make the trainer and the engine compute one boundary of the forward alike.

Each switch removes one place where the two stacks computed differently, on one side (engine
settings in ``engine_settings``; trainer modules and kernels in ``layer_spec``, ``trainer_kernels``
and ``logprobs``). Switches are process-global state, read where the boundary is computed:

- ``--embedded-true-on-policy``: every switch of ``TRUE_ON_POLICY`` on (the trainer's log-probs
  then equal the engine's bit for bit on the dense bf16 model), less ``--embedded-true-on-policy-without``;
- ``--embedded-levers NAME[,NAME]``: these switches on, alone or beside the above (one boundary
  aligned, every other native: the drift budget's real-run check, docs/attribution.md);
- the drift budget's re-scorer (harness.embedded.lever_score) switches them between forward passes.

knobs/levers.yaml groups the switches into one lever per boundary, with the side each changes.

Engine side, as vLLM settings in whichever process runs the engine:
- ``engine-native-ops``: ``compilation_config.custom_ops = ["none"]`` (vLLM's native torch ops instead
  of its C++ ops; on this stack the rotary embedding is the one C++ op the model runs);
- ``engine-split-kv-off``: ``VLLM_CPU_ATTN_SPLIT_KV=0`` (with few running sequences the CPU attention
  kernel splits the KV loop across threads and decode stops matching prefill);
- ``engine-rounded-residual``: ``ir_op_priority.fused_add_rms_norm = [embedded_rounded_residual]``,
  the residual sum rounded to the model dtype before the norm reads it, as Megatron's separate add does;
- ``engine-reference-filter``: the sampler's top-k/top-p mask computed by the reference mask the
  trainer's processed-contract replay uses (harness.embedded.logprobs.processed_mask), in place of
  vLLM's ``apply_top_k_top_p``; its log-softmax stays vLLM's. Needs the sampler in this process;
- ``engine-reference-log-softmax``: the sampler's processed log-probs recomputed by the reference
  (``log_softmax(dtype=float32)`` of its filtered logits, vLLM's own formula) whatever its kernel
  did; with the trainer's ``trainer-engine-log-softmax`` both sides run that one formula.
Trainer side, as Megatron modules or kernels:
- ``trainer-engine-{input,qk,pre-mlp,final}-norm``: vLLM's RMSNorm formula with the weight in the
  model dtype (Megatron's torch norm keeps fp32 weights and rounds once);
- ``trainer-engine-attention``: core attention through vLLM's own CPU attention kernel;
- ``trainer-engine-{qkv,o-proj}-gemm``, ``trainer-engine-mlp``, ``trainer-engine-lm-head``: the
  GEMMs through vLLM's own CPU ops on the trainer's weights (on an MoE model the MLP lever runs the
  router and the experts through vLLM's MoE ops: moe_kernel.py);
- ``trainer-engine-embedding``: the embedding lookup through vLLM's embedding op;
- ``trainer-fp8-weights`` / ``trainer-fp8-activations``: the trainer's linears compute with the
  rollout's quantised operands (e4m3 weight blocks / activation groups, harness.embedded.fp8) where
  the rollout quantises (a no-op when it does not);
- ``trainer-engine-log-softmax``: the selected log-prob as vLLM's sampler computes it;
- ``trainer-engine-gather``: the target read from a full log-prob row (the engine's order) instead
  of Megatron's predicted-logit gather (exact either way; the lever measures that it is).
"""

from __future__ import annotations

import os

ENV_FLAG = "EMBEDDED_TRUE_ON_POLICY"
ENGINE, TRAINER = "engine", "trainer"

# Every switch by name: (the side it changes, what it does).
SWITCHES: dict[str, tuple[str, str]] = {
    "engine-native-ops": (ENGINE, "compilation_config.custom_ops=['none'] (vLLM's native torch ops; rotary is the C++ op they replace)"),
    "engine-split-kv-off": (ENGINE, "VLLM_CPU_ATTN_SPLIT_KV=0 (decode attention as prefill)"),
    "engine-rounded-residual": (ENGINE, "ir_op_priority.fused_add_rms_norm=['embedded_rounded_residual'] (residual rounded before the norm)"),
    "engine-reference-filter": (ENGINE, "the sampler's top-k/top-p mask by the trainer's replay mask (harness.embedded.logprobs.processed_mask)"),
    "engine-reference-log-softmax": (ENGINE, "the sampler's processed log-probs by the reference fp32 log-softmax of its filtered logits"),
    "trainer-engine-embedding": (TRAINER, "the embedding lookup through vLLM's embedding op"),
    "trainer-engine-input-norm": (TRAINER, "EngineRMSNorm at every layer's input norm (vLLM's formula, weight in the model dtype)"),
    "trainer-engine-qk-norm": (TRAINER, "EngineRMSNorm at every q/k norm"),
    "trainer-engine-pre-mlp-norm": (TRAINER, "EngineRMSNorm at every post-attention (pre-MLP) norm"),
    "trainer-engine-final-norm": (TRAINER, "EngineRMSNorm at the final norm"),
    "trainer-engine-qkv-gemm": (TRAINER, "the QKV projection through vLLM's CPU GEMM dispatch"),
    "trainer-engine-attention": (TRAINER, "EngineKernelAttention (vLLM's CPU attention kernel; Megatron's torch-math backward)"),
    "trainer-engine-o-proj-gemm": (TRAINER, "the attention output projection through vLLM's CPU GEMM dispatch"),
    "trainer-engine-mlp": (
        TRAINER,
        "the MLP's GEMMs through vLLM's CPU GEMM dispatch; on an MoE layer its router and experts through vLLM's MoE ops",
    ),
    "trainer-engine-lm-head": (TRAINER, "the LM-head GEMM through vLLM's LM-head op (UnquantizedEmbeddingMethod.apply)"),
    "trainer-fp8-weights": (TRAINER, "the linears' weights as the rollout quantises them (e4m3, 128x128 blocks) where it does"),
    "trainer-fp8-activations": (TRAINER, "the linears' inputs as the rollout quantises them (e4m3, 1x128 groups) where it does"),
    "trainer-engine-log-softmax": (TRAINER, "log-softmax as vLLM's sampler computes it"),
    "trainer-engine-gather": (TRAINER, "the target's log-prob gathered from a full log-prob row, as the engine reads it"),
}
# What --embedded-true-on-policy switches on: the switches that make the dense bf16 model's log-probs
# equal, bit for bit (docs/true-on-policy.md). The others are measured by the drift budget.
TRUE_ON_POLICY = (
    "engine-native-ops",
    "engine-split-kv-off",
    "engine-rounded-residual",
    "trainer-engine-input-norm",
    "trainer-engine-qk-norm",
    "trainer-engine-pre-mlp-norm",
    "trainer-engine-final-norm",
    "trainer-engine-attention",
    "trainer-engine-log-softmax",
)
# Names that stand for several switches (the four norms were one lever before the budget split them).
GROUPS = {"trainer-engine-norm": ("trainer-engine-input-norm", "trainer-engine-qk-norm", "trainer-engine-pre-mlp-norm", "trainer-engine-final-norm")}
# Switches read when the trainer's model is built (its layer spec: layer_spec.block_spec); the
# others are read at every call.
LAYER_SPEC = (
    "trainer-engine-input-norm",
    "trainer-engine-qk-norm",
    "trainer-engine-pre-mlp-norm",
    "trainer-engine-final-norm",
    "trainer-engine-attention",
)
# Switches that need the engine's sampler in the trainer's process (colocate, TP=1).
IN_PROCESS_ENGINE = ("engine-reference-filter", "engine-reference-log-softmax")
# Until a run configures its own (harness.embedded.loop does before it builds anything), the process
# holds the true-on-policy set: a model built with the lever layer spec outside a run (a test, a tool)
# is the true-on-policy model, as it always was.
_on: frozenset[str] = frozenset(TRUE_ON_POLICY)


def expand(names) -> frozenset[str]:
    """Switch names with groups expanded; an unknown name is a ValueError naming the known ones."""
    out: set[str] = set()
    for name in names:
        if name in GROUPS:
            out.update(GROUPS[name])
        elif name in SWITCHES:
            out.add(name)
        else:
            raise ValueError(f"unknown lever {name!r}; known: {', '.join(sorted([*SWITCHES, *GROUPS]))}")
    return frozenset(out)


def switches_on(*, true_on_policy: bool, without, levers) -> frozenset[str]:
    """The switches a run's flags turn on: TRUE_ON_POLICY less `without` (with --embedded-true-on-policy), plus `levers`."""
    base = frozenset(TRUE_ON_POLICY) - expand(without) if true_on_policy else frozenset()
    return base | expand(levers)


def configure(on) -> None:
    """The switches on in this process, before the policy and engine are built (the re-scorer sets
    them again before each forward pass)."""
    global _on
    _on = expand(on)


def lever_on(name: str) -> bool:
    if name not in SWITCHES:
        raise KeyError(name)
    return name in _on


def active() -> frozenset[str]:
    return _on


def any_on(side: str) -> bool:
    return any(SWITCHES[name][0] == side for name in _on)


def record(on) -> dict:
    """What the run record says about the levers: each switch with on/off, its side and what it does."""
    on = expand(on)
    return {name: {"on": name in on, "side": side, "what": what} for name, (side, what) in SWITCHES.items()}


def install_from_env() -> None:
    """Called at import by modules that a spawned engine process re-imports (like fp8's)."""
    if os.environ.get(ENV_FLAG) == "1":
        from harness.embedded.true_on_policy.engine_settings import register_rounded_residual_norm

        register_rounded_residual_norm()
