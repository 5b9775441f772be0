"""Hugging Face config.json -> Megatron architecture flags, family by family, as VIME's model
scripts set them (the command and the knob file it writes: harness/spec/model_import.py).

Each family reads its config.json through HFConfig (one typed read per key, one error line naming
the file and key for a value the scripts never meet) and returns every flag with its origin: a
config.json key, or the script's constant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.spec.errors import SpecError

VIME_SCRIPTS = "vllm-project/vime@b332ffc2c80e204ad520f93daa0aa7d1e65294d8 scripts/models"


@dataclass(frozen=True)
class Derived:
    value: bool | int | float | str | list | None  # None: the flag is removed (a layer's null)
    origin: str  # "config.json num_hidden_layers" or "qwen3-8B.sh: constant"


class HFConfig:
    """A config.json, read once; each typed read names the file and key when the value is wrong."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SpecError(f"{path}: no such file (expected a Hugging Face config.json)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SpecError(f"{path}: not readable JSON ({' '.join(str(err).split())[:160]})") from None
        if not isinstance(data, dict):
            raise SpecError(f"{path}: expected a JSON object (a Hugging Face config.json), got {type(data).__name__}")
        self.data = data

    def get(self, key: str, kind: type | tuple[type, ...], default=...):
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise SpecError(f"{self.path}: {key}: expected {_kind_name(kind)}, got nothing (the key is missing)")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)) or not isinstance(value, kind):
            raise SpecError(f"{self.path}: {key}: expected {_kind_name(kind)}, got {value!r} (type={type(value).__name__})")
        return value

    def expect(self, key: str, allowed: tuple, why: str) -> None:
        value = self.data.get(key)
        if value not in allowed:
            raise SpecError(f"{self.path}: {key}: expected {' or '.join(map(repr, allowed))} ({why}), got {value!r}")


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list", dict: "an object"}[k] for k in kinds
    )


def _from(config: HFConfig, key: str, kind=int, default=...) -> Derived:
    value = config.get(key, kind, default)
    return Derived(value, f"config.json {key}" if key in config.data and config.data[key] is not None else f"{key} absent: its default")


def _rope_base(config: HFConfig) -> Derived:
    theta = config.get("rope_theta", (int, float))
    if float(theta) != int(theta):
        raise SpecError(f"{config.path}: rope_theta: expected a whole number (Megatron's --rotary-base is an int), got {theta!r}")
    return Derived(int(theta), "config.json rope_theta")


def _layer_freq(moe_layers: list[bool]) -> str:
    # VIME's scripts build MOE_LAYER_FREQ with printf "[%s]" and IFS=', ', which joins with ','.
    return "[" + ",".join("1" if moe else "0" for moe in moe_layers) + "]"


def _qwen3_attention(config: HFConfig, script: str) -> dict[str, Derived]:
    config.expect("hidden_act", ("silu",), "the scripts render --swiglu: a gated SiLU MLP")
    config.expect("attention_bias", (False, None), "the scripts render --disable-bias-linear")
    config.expect("rope_scaling", (None,), "the Qwen3 scripts set no rope scaling")
    heads = config.get("num_attention_heads", int)
    kv_heads = config.get("num_key_value_heads", int, heads)
    head_dim = config.get("head_dim", int, config.get("hidden_size", int) // heads)
    flags = {
        "disable-bias-linear": Derived(True, "config.json attention_bias false (Qwen3 has no linear biases)"),
        "qk-layernorm": Derived(True, f"{script}: constant (Qwen3 normalises q and k per head)"),
    }
    if kv_heads != heads:
        flags["group-query-attention"] = Derived(True, "config.json num_key_value_heads < num_attention_heads")
        flags["num-query-groups"] = _from(config, "num_key_value_heads")
    flags |= {
        "num-attention-heads": _from(config, "num_attention_heads"),
        "kv-channels": Derived(head_dim, "config.json head_dim" if "head_dim" in config.data else "hidden_size / num_attention_heads"),
        "num-layers": _from(config, "num_hidden_layers"),
        "hidden-size": _from(config, "hidden_size"),
        "ffn-hidden-size": _from(config, "intermediate_size"),
        "normalization": Derived("RMSNorm", f"{script}: constant (Qwen3RMSNorm)"),
        "norm-epsilon": _from(config, "rms_norm_eps", (float, int)),
        "swiglu": Derived(True, "config.json hidden_act silu (gated MLP)"),
        "rotary-base": _rope_base(config),
        "vocab-size": _from(config, "vocab_size"),
    }
    if not config.get("tie_word_embeddings", bool, False):
        flags["untie-embeddings-and-output-weights"] = Derived(True, "config.json tie_word_embeddings false")
    return flags


def _qwen3(config: HFConfig) -> dict[str, Derived]:
    script = "qwen3-8B.sh"
    flags = _qwen3_attention(config, script)
    flags["use-rotary-position-embeddings"] = Derived(True, f"{script}: constant (RoPE)")
    return flags


def _qwen3_moe(config: HFConfig) -> dict[str, Derived]:
    script = "qwen3-30B-A3B.sh / qwen3-235B-A22B.sh"
    flags = _qwen3_attention(config, script)
    flags["position-embedding-type"] = Derived("rope", f"{script}: constant")
    flags["rotary-percent"] = Derived(1.0, f"{script}: constant")
    layers = config.get("num_hidden_layers", int)
    experts = config.get("num_experts", int)
    dense_only = set(config.get("mlp_only_layers", list, []))
    step = config.get("decoder_sparse_step", int, 1)
    # Qwen3MoeDecoderLayer: an MoE block where the layer is not in mlp_only_layers and (i + 1) % step == 0.
    moe_layers = [i not in dense_only and experts > 0 and (i + 1) % step == 0 for i in range(layers)]
    flags |= {
        "moe-ffn-hidden-size": _from(config, "moe_intermediate_size"),
        "moe-router-score-function": Derived("softmax", f"{script}: constant (Qwen3-MoE's softmax router)"),
        "moe-token-dispatcher-type": Derived("alltoall", f"{script}: constant"),
        "moe-router-topk": _from(config, "num_experts_per_tok"),
        "moe-layer-freq": Derived(_layer_freq(moe_layers), "config.json num_hidden_layers, mlp_only_layers, decoder_sparse_step"),
        "num-experts": _from(config, "num_experts"),
        "moe-grouped-gemm": Derived(True, f"{script}: constant"),
        "moe-token-drop-policy": Derived("probs", f"{script}: constant"),
        "moe-router-dtype": Derived("fp32", f"{script}: constant"),
        "moe-aux-loss-coeff": Derived(0, f"{script}: constant (RL runs without the aux loss)"),
        "moe-permute-fusion": Derived(True, f"{script}: constant"),
    }
    if not config.get("norm_topk_prob", bool, True):
        # Megatron's softmax router normalises over the top-k unless told to softmax first.
        flags["moe-router-pre-softmax"] = Derived(True, "config.json norm_topk_prob false")
    return flags


def _deepseek_v3(config: HFConfig) -> dict[str, Derived]:
    script = "deepseek-v3.sh"
    config.expect("hidden_act", ("silu",), "the script renders --swiglu: a gated SiLU MLP")
    scaling = config.get("rope_scaling", dict, {})
    layers = config.get("num_hidden_layers", int)
    first_dense = config.get("first_k_dense_replace", int, 0)
    freq = config.get("moe_layer_freq", int, 1)
    experts = config.get("n_routed_experts", int)
    # DeepseekV3DecoderLayer: an MoE block from layer first_k_dense_replace on, every moe_layer_freq-th layer.
    moe_layers = [experts > 0 and i >= first_dense and i % freq == 0 for i in range(layers)]
    shared = config.get("n_shared_experts", int, 0)
    moe_ffn = config.get("moe_intermediate_size", int)
    flags = {
        "disable-bias-linear": Derived(True, f"{script}: constant (DeepSeek-V3 has no linear biases)"),
        "num-layers": _from(config, "num_hidden_layers"),
        "hidden-size": _from(config, "hidden_size"),
        "ffn-hidden-size": _from(config, "intermediate_size"),
        "num-attention-heads": _from(config, "num_attention_heads"),
        "kv-channels": _from(config, "v_head_dim"),
        "normalization": Derived("RMSNorm", f"{script}: constant"),
        "position-embedding-type": Derived("rope", f"{script}: constant"),
        "norm-epsilon": _from(config, "rms_norm_eps", (float, int)),
        "swiglu": Derived(True, "config.json hidden_act silu (gated MLP)"),
        "vocab-size": _from(config, "vocab_size"),
        "multi-latent-attention": Derived(True, f"{script}: constant (MLA: q_lora_rank/kv_lora_rank in config.json)"),
        "q-lora-rank": _from(config, "q_lora_rank"),
        "kv-lora-rank": _from(config, "kv_lora_rank"),
        "qk-head-dim": _from(config, "qk_nope_head_dim"),
        "qk-pos-emb-head-dim": _from(config, "qk_rope_head_dim"),
        "v-head-dim": _from(config, "v_head_dim"),
        "qk-layernorm": Derived(True, f"{script}: constant (MLA's q/kv low-rank norms)"),
        "rotary-base": _rope_base(config),
        "attention-softmax-in-fp32": Derived(True, f"{script}: constant"),
        "no-rope-fusion": Derived(True, f"{script}: constant"),
        "num-experts": _from(config, "n_routed_experts"),
        "moe-layer-freq": Derived(_layer_freq(moe_layers), "config.json num_hidden_layers, first_k_dense_replace, moe_layer_freq"),
        "moe-ffn-hidden-size": _from(config, "moe_intermediate_size"),
        "moe-router-topk": _from(config, "num_experts_per_tok"),
        "moe-router-pre-softmax": Derived(True, f"{script}: constant"),
        "moe-router-score-function": _from(config, "scoring_func", str),
        "moe-router-load-balancing-type": Derived("seq_aux_loss", f"{script}: constant"),
        "moe-token-dispatcher-type": Derived("alltoall", f"{script}: constant"),
        "moe-aux-loss-coeff": Derived(0, f"{script}: constant (RL runs without the aux loss)"),
        "moe-router-bias-update-rate": Derived(0, f"{script}: constant"),
        "moe-grouped-gemm": Derived(True, f"{script}: constant"),
        "moe-router-topk-scaling-factor": _from(config, "routed_scaling_factor", (int, float)),
        "moe-router-dtype": Derived("fp32", f"{script}: constant"),
        "moe-permute-fusion": Derived(True, f"{script}: constant"),
    }
    if shared:
        flags["moe-shared-expert-intermediate-size"] = Derived(shared * moe_ffn, "config.json n_shared_experts x moe_intermediate_size")
    if config.data.get("topk_method") == "noaux_tc":
        flags["moe-router-enable-expert-bias"] = Derived(True, "config.json topk_method noaux_tc (the expert-bias router)")
    if config.data.get("n_group"):
        flags["moe-router-num-groups"] = _from(config, "n_group")
        flags["moe-router-group-topk"] = _from(config, "topk_group")
    for key, flag in (("factor", "rotary-scaling-factor"), ("mscale", "mscale"), ("mscale_all_dim", "mscale-all-dim")):
        if key in scaling:
            flags[flag] = Derived(scaling[key], f"config.json rope_scaling.{key}")
    # Megatron's flash backend has no MLA kernel: VIME's launch scripts leave it out for MLA models
    # ("need to comment this when using model with MLA", scripts/run-moonlight-16B-A3B.sh@40ec17a).
    flags["attention-backend"] = Derived(None, "MLA: no --attention-backend flash (run-moonlight-16B-A3B.sh@40ec17a)")
    _untied(config, flags)
    return flags


def _gqa(config: HFConfig, flags: dict[str, Derived]) -> None:
    """Grouped-query attention where config.json has fewer key/value heads than query heads."""
    heads = config.get("num_attention_heads", int)
    if config.get("num_key_value_heads", int, heads) != heads:
        flags["group-query-attention"] = Derived(True, "config.json num_key_value_heads < num_attention_heads")
        flags["num-query-groups"] = _from(config, "num_key_value_heads")


def _head_dim(config: HFConfig) -> Derived:
    if "head_dim" in config.data:
        return _from(config, "head_dim")
    return Derived(config.get("hidden_size", int) // config.get("num_attention_heads", int), "hidden_size / num_attention_heads")


def _untied(config: HFConfig, flags: dict[str, Derived]) -> None:
    if not config.get("tie_word_embeddings", bool, False):
        flags["untie-embeddings-and-output-weights"] = Derived(True, "config.json tie_word_embeddings false")


def _llama(config: HFConfig) -> dict[str, Derived]:
    script = "llama3.1-8B-Instruct.sh"
    config.expect("hidden_act", ("silu",), "the script renders --swiglu: a gated SiLU MLP")
    config.expect("attention_bias", (False, None), "the script renders --disable-bias-linear")
    flags = {
        "swiglu": Derived(True, "config.json hidden_act silu (gated MLP)"),
        "num-layers": _from(config, "num_hidden_layers"),
        "hidden-size": _from(config, "hidden_size"),
        "ffn-hidden-size": _from(config, "intermediate_size"),
        "num-attention-heads": _from(config, "num_attention_heads"),
    }
    _gqa(config, flags)
    flags |= {
        "max-position-embeddings": _from(config, "max_position_embeddings"),
        "use-rotary-position-embeddings": Derived(True, f"{script}: constant (RoPE)"),
        "disable-bias-linear": Derived(True, "config.json attention_bias false"),
        "normalization": Derived("RMSNorm", f"{script}: constant (LlamaRMSNorm)"),
        "norm-epsilon": _from(config, "rms_norm_eps", (float, int)),
        "rotary-base": _rope_base(config),
        "vocab-size": _from(config, "vocab_size"),
        "kv-channels": _head_dim(config),
    }
    scaling = config.get("rope_scaling", dict, {})
    if scaling:
        if scaling.get("rope_type") != "llama3":
            raise SpecError(
                f"{config.path}: rope_scaling.rope_type: expected 'llama3' (Megatron's --use-rope-scaling), got {scaling.get('rope_type')!r}"
            )
        flags["use-rope-scaling"] = Derived(True, "config.json rope_scaling.rope_type llama3")
        flags["rotary-scaling-factor"] = Derived(float(scaling["factor"]), "config.json rope_scaling.factor")
    _untied(config, flags)
    return flags


def _glm4_moe(config: HFConfig) -> dict[str, Derived]:
    script = "glm4.5-106B-A12B.sh"
    config.expect("hidden_act", ("silu",), "the script renders --swiglu: a gated SiLU MLP")
    layers = config.get("num_hidden_layers", int)
    first_dense = config.get("first_k_dense_replace", int, 0)
    shared = config.get("n_shared_experts", int, 0)
    flags = {"disable-bias-linear": Derived(True, f"{script}: constant (no biases but q/k/v's)")}
    _gqa(config, flags)
    flags |= {
        "num-attention-heads": _from(config, "num_attention_heads"),
        "kv-channels": _head_dim(config),
        "num-layers": _from(config, "num_hidden_layers"),
        "hidden-size": _from(config, "hidden_size"),
        "ffn-hidden-size": _from(config, "intermediate_size"),
    }
    if config.get("attention_bias", bool, False):
        flags["add-qkv-bias"] = Derived(True, "config.json attention_bias true (q/k/v biases)")
    if config.get("use_qk_norm", bool, False):
        flags["qk-layernorm"] = Derived(True, "config.json use_qk_norm true")
    flags |= {
        "normalization": Derived("RMSNorm", f"{script}: constant"),
        "norm-epsilon": _from(config, "rms_norm_eps", (float, int)),
        "position-embedding-type": Derived("rope", f"{script}: constant"),
        "rotary-percent": _from(config, "partial_rotary_factor", (float, int), 1.0),
        "swiglu": Derived(True, "config.json hidden_act silu (gated MLP)"),
        "vocab-size": _from(config, "vocab_size"),
        "rotary-base": _rope_base(config),
        "moe-ffn-hidden-size": _from(config, "moe_intermediate_size"),
        "moe-router-pre-softmax": Derived(True, f"{script}: constant"),
        "moe-router-score-function": Derived("sigmoid", f"{script}: constant (GLM-4.5's sigmoid router)"),
        "moe-router-enable-expert-bias": Derived(True, f"{script}: constant (noaux_tc expert bias)"),
        "moe-router-bias-update-rate": Derived(0, f"{script}: constant"),
        "moe-router-load-balancing-type": Derived("seq_aux_loss", f"{script}: constant"),
        "moe-token-dispatcher-type": Derived("alltoall", f"{script}: constant"),
        "moe-router-topk": _from(config, "num_experts_per_tok"),
        "moe-layer-freq": Derived(_layer_freq([i >= first_dense for i in range(layers)]), "config.json num_hidden_layers, first_k_dense_replace"),
        "num-experts": _from(config, "n_routed_experts"),
        "moe-grouped-gemm": Derived(True, f"{script}: constant"),
        "moe-router-dtype": Derived("fp32", f"{script}: constant"),
        "moe-permute-fusion": Derived(True, f"{script}: constant"),
        "moe-aux-loss-coeff": Derived(0, f"{script}: constant (RL runs without the aux loss)"),
    }
    if shared:
        flags["moe-shared-expert-intermediate-size"] = Derived(
            shared * config.get("moe_intermediate_size", int), "config.json n_shared_experts x moe_intermediate_size"
        )
    if config.get("routed_scaling_factor", (int, float), 1.0) != 1.0:
        flags["moe-router-topk-scaling-factor"] = _from(config, "routed_scaling_factor", (int, float))
    _untied(config, flags)
    return flags


def _qwen3_next(config: HFConfig) -> dict[str, Derived]:
    """Qwen3-Next: gated attention (VIME's Megatron patch adds --use-gated-attention) and a gated
    delta-net layer spec from vime_plugins, with Qwen3-MoE's router and a gated shared expert."""
    script = "qwen3-next-80B-A3B.sh"
    config.expect("hidden_act", ("silu",), "the script renders --swiglu: a gated SiLU MLP")
    config.expect("attention_bias", (False, None), "the script renders --disable-bias-linear")
    layers = config.get("num_hidden_layers", int)
    dense_only = set(config.get("mlp_only_layers", list, []))
    step = config.get("decoder_sparse_step", int, 1)
    flags = {
        "spec": Derived(["vime_plugins.models.qwen3_next", "get_qwen3_next_spec"], f"{script}: constant (the layer spec VIME ships)"),
        "disable-bias-linear": Derived(True, "config.json attention_bias false"),
        "qk-layernorm": Derived(True, f"{script}: constant"),
    }
    _gqa(config, flags)
    flags |= {
        "num-attention-heads": _from(config, "num_attention_heads"),
        "kv-channels": _head_dim(config),
        "num-layers": _from(config, "num_hidden_layers"),
        "hidden-size": _from(config, "hidden_size"),
        "ffn-hidden-size": _from(config, "intermediate_size"),
        "use-gated-attention": Derived(True, f"{script}: constant (Qwen3-Next's gated attention)"),
        "normalization": Derived("RMSNorm", f"{script}: constant"),
        "apply-layernorm-1p": Derived(True, f"{script}: constant (zero-centred RMSNorm weights)"),
        "position-embedding-type": Derived("rope", f"{script}: constant"),
        "norm-epsilon": _from(config, "rms_norm_eps", (float, int)),
        "rotary-percent": _from(config, "partial_rotary_factor", (float, int), 1.0),
        "swiglu": Derived(True, "config.json hidden_act silu (gated MLP)"),
        "vocab-size": _from(config, "vocab_size"),
        "rotary-base": _rope_base(config),
        "moe-ffn-hidden-size": _from(config, "moe_intermediate_size"),
        "moe-shared-expert-intermediate-size": _from(config, "shared_expert_intermediate_size"),
        "moe-router-score-function": Derived("softmax", f"{script}: constant"),
        "moe-token-dispatcher-type": Derived("alltoall", f"{script}: constant"),
        "moe-router-topk": _from(config, "num_experts_per_tok"),
        "moe-layer-freq": Derived(
            _layer_freq([i not in dense_only and (i + 1) % step == 0 for i in range(layers)]),
            "config.json num_hidden_layers, mlp_only_layers, decoder_sparse_step",
        ),
        "num-experts": _from(config, "num_experts"),
        "moe-grouped-gemm": Derived(True, f"{script}: constant"),
        "moe-token-drop-policy": Derived("probs", f"{script}: constant"),
        "moe-router-dtype": Derived("fp32", f"{script}: constant"),
        "moe-permute-fusion": Derived(True, f"{script}: constant"),
        "moe-aux-loss-coeff": Derived(0, f"{script}: constant (RL runs without the aux loss)"),
        "attention-output-gate": Derived(True, f"{script}: constant (Qwen3-Next gates the attention output)"),
        "moe-shared-expert-gate": Derived(True, f"{script}: constant (a gated shared expert)"),
    }
    _untied(config, flags)
    return flags


FAMILIES = {
    "qwen3": (_qwen3, "qwen3-8B.sh"),
    "qwen3_moe": (_qwen3_moe, "qwen3-30B-A3B.sh"),
    "deepseek_v3": (_deepseek_v3, "deepseek-v3.sh"),
    "llama": (_llama, "llama3.1-8B-Instruct.sh"),
    "glm4_moe": (_glm4_moe, "glm4.5-106B-A12B.sh"),
    "qwen3_next": (_qwen3_next, "qwen3-next-80B-A3B.sh"),
}
# The script each family's flags were read from, where it is not at VIME_SCRIPTS' commit.
SCRIPT_COMMITS = {"qwen3_next": "vllm-project/vime@40ec17a0fc102df931d953414def7d3948678ac9 scripts/models"}
