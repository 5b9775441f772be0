"""Does the model fit the GPUs a stage gives it? A lower bound, checked before a job is submitted.

Training with Adam in mixed precision holds, for every parameter, its bf16 weight and gradient and
fp32 master weight and two moments: 16 bytes (the ZeRO paper's accounting), whatever the
parallelism, because tensor, pipeline, expert and data parallelism (with the distributed
optimizer) only divide that state among the trainer's GPUs; activations come on top. So a model
whose 16 bytes per parameter exceed the trainer's GPUs' memory cannot train there however it is
laid out. The rollout side holds at least one byte per parameter (FP8 weights) in each engine's
GPUs' share of vLLM's memory. The parameter count is computed from the Megatron architecture flags
the model file renders (harness/spec/models.py), the GPU memory from the stage's node type
(knobs/stages.yaml `hardware:`, or the site's node type for the stage).
"""

from __future__ import annotations

import ast

from harness.spec.errors import SpecError

GIB = 1024**3
# Bytes of training state per parameter: bf16 weight + bf16 gradient + fp32 master weight + Adam's
# two fp32 moments (2 + 2 + 4 + 4 + 4).
ADAM_MIXED_BYTES = 16
# With --optimizer-cpu-offload the master weights and moments live in host memory: weight + gradient.
OFFLOADED_OPTIMIZER_BYTES = 4
# The smallest rollout weights VIME serves: FP8, one byte per parameter.
ROLLOUT_MIN_BYTES = 1


def _int(flags: dict, name: str, default: int | None = None) -> int | None:
    value = flags.get(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def moe_layers(flags: dict, layers: int) -> list[bool]:
    """Which of the `layers` layers are MoE layers, from --moe-layer-freq (an int k: every k-th
    layer; a list such as "[0,0,1,...]" or "[0]*3+[1]*58": per layer). No experts: none."""
    if not _int(flags, "num-experts"):
        return [False] * layers
    freq = flags.get("moe-layer-freq", 1)
    if isinstance(freq, int) and not isinstance(freq, bool):
        return [i % freq == 0 for i in range(layers)]
    pattern = _list_expression(str(freq))
    if pattern is None or len(pattern) != layers:
        raise SpecError(f"--moe-layer-freq {freq!r}: expected an integer or a list of {layers} zeros and ones (one per layer)")
    return [bool(x) for x in pattern]


def _list_expression(text: str) -> list | None:
    """A list literal, or lists joined by + and repeated by * (Megatron evaluates the same)."""

    def value(node):
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(ast.dump(node))

    try:
        result = value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError):
        return None
    return result if isinstance(result, list) else None


def attention_parameters(flags: dict, hidden: int) -> int:
    """One layer's attention projections (biases and norms left out: a lower bound)."""
    heads = _int(flags, "num-attention-heads", 1)
    if flags.get("multi-latent-attention"):
        qk, rope, v = _int(flags, "qk-head-dim", 128), _int(flags, "qk-pos-emb-head-dim", 64), _int(flags, "v-head-dim", 128)
        kv_rank, q_rank = _int(flags, "kv-lora-rank", 512), _int(flags, "q-lora-rank")
        q = hidden * q_rank + q_rank * heads * (qk + rope) if q_rank else hidden * heads * (qk + rope)
        kv = hidden * (kv_rank + rope) + kv_rank * heads * (qk + v)
        return q + kv + heads * v * hidden
    head_dim = _int(flags, "kv-channels", hidden // heads)
    groups = _int(flags, "num-query-groups", heads) if flags.get("group-query-attention") else heads
    gate = hidden * heads * head_dim if flags.get("attention-output-gate") else 0
    return 2 * hidden * heads * head_dim + 2 * hidden * groups * head_dim + gate


def parameters(flags: dict) -> int | None:
    """The model's parameter count from its Megatron flags; None when the flags do not say
    (no --num-layers or --hidden-size: a model not rendered on this backend)."""
    layers, hidden = _int(flags, "num-layers"), _int(flags, "hidden-size")
    if not layers or not hidden:
        return None
    vocab = _int(flags, "vocab-size", 0) or _int(flags, "padded-vocab-size", 0)
    embedding = vocab * hidden * (2 if flags.get("untie-embeddings-and-output-weights") else 1)
    mlp_matrices = 3 if flags.get("swiglu") else 2
    dense = mlp_matrices * hidden * (_int(flags, "ffn-hidden-size", 4 * hidden))
    experts = _int(flags, "num-experts", 0)
    moe = experts * mlp_matrices * hidden * _int(flags, "moe-ffn-hidden-size", 0) + hidden * experts
    moe += mlp_matrices * hidden * _int(flags, "moe-shared-expert-intermediate-size", 0)
    per_layer = [attention_parameters(flags, hidden) + (moe if is_moe else dense) for is_moe in moe_layers(flags, layers)]
    return embedding + sum(per_layer)


def training_bytes_per_parameter(flags: dict) -> int:
    return OFFLOADED_OPTIMIZER_BYTES if flags.get("optimizer-cpu-offload") else ADAM_MIXED_BYTES


def shortfalls(flags: dict, gpu_memory_gib: float, actor_gpus: int) -> list[tuple[str, str]]:
    """(flag to blame, why) for each side the model cannot fit; empty when both fit."""
    params = parameters(flags)
    if params is None:
        return []
    found = []
    per_param = training_bytes_per_parameter(flags)
    train_need = params * per_param / GIB
    train_have = actor_gpus * gpu_memory_gib
    if train_need > train_have:
        found.append(
            (
                "actor-num-nodes",
                f"the model has {params / 1e9:.1f}B parameters: training holds at least {per_param} bytes each "
                f"(bf16 weight and gradient, fp32 master weight and Adam moments) = {train_need:,.0f} GiB, more than the "
                f"trainer's {actor_gpus} GPUs x {gpu_memory_gib:g} GiB = {train_have:,.0f} GiB before any activation",
            )
        )
    engine_gpus = _int(flags, "rollout-num-gpus-per-engine", 1)
    share = flags.get("vllm-gpu-memory-utilization", 0.9)
    share = share if isinstance(share, (int, float)) and not isinstance(share, bool) else 0.9
    rollout_need = params * ROLLOUT_MIN_BYTES / GIB / engine_gpus
    rollout_have = gpu_memory_gib * share
    if rollout_need > rollout_have:
        found.append(
            (
                "rollout-num-gpus-per-engine",
                f"each vLLM engine holds the model's weights, at least one byte a parameter (FP8): {params / 1e9:.1f}B over "
                f"{engine_gpus} GPU(s) = {rollout_need:,.0f} GiB a GPU, more than vLLM's share ({share:g} x {gpu_memory_gib:g} GiB)",
            )
        )
    return found
