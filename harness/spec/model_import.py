"""`python -m harness model import CONFIG_JSON --name NAME`: a Hugging Face config.json -> knobs/models/NAME.yaml.

VIME takes a model's architecture only from Megatron flags, which its launch scripts source from
`scripts/models/<model>.sh`; at start-up it checks them against the checkpoint's config.json. This
derives the same flags from the config.json, family by family, the way those scripts set them
(vllm-project/vime@b332ffc: qwen3-8B.sh for dense Qwen3, qwen3-30B-A3B.sh and qwen3-235B-A22B.sh for
Qwen3-MoE, deepseek-v3.sh for DeepSeek-V3), and writes a model knob file in the format the loader
reads (harness/spec/models.py), each flag with a comment naming where its value came from: a
config.json key, or the script's constant. A family it does not know, or a config value the
scripts never meet (biases, rope scaling on Qwen3, a non-SiLU MLP), is one error line naming the
file and key: guessing an architecture would render a model VIME then refuses, or worse, accepts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.spec.errors import SpecError

VIME_SCRIPTS = "vllm-project/vime@b332ffc2c80e204ad520f93daa0aa7d1e65294d8 scripts/models"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class Derived:
    value: bool | int | float | str
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
    if not config.get("tie_word_embeddings", bool, False):
        flags["untie-embeddings-and-output-weights"] = Derived(True, "config.json tie_word_embeddings false")
    return flags


FAMILIES = {"qwen3": (_qwen3, "qwen3-8B.sh"), "qwen3_moe": (_qwen3_moe, "qwen3-30B-A3B.sh"), "deepseek_v3": (_deepseek_v3, "deepseek-v3.sh")}


def derive(config_path: Path) -> tuple[str, dict[str, Derived]]:
    """(model_type, flags with their origins) for a config.json; SpecError (one line) otherwise."""
    config = HFConfig(Path(config_path))
    model_type = config.get("model_type", str)
    if model_type not in FAMILIES:
        raise SpecError(
            f"{config_path}: model_type: expected one of {', '.join(FAMILIES)} (the families VIME's model scripts cover), got {model_type!r}"
        )
    return model_type, FAMILIES[model_type][0](config)


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def render_model_file(name: str, config_path: Path, model_type: str, flags: dict[str, Derived]) -> str:
    digest = hashlib.sha256(Path(config_path).read_bytes()).hexdigest()[:12]
    experts = flags.get("num-experts")
    shape = f"{flags['num-layers'].value} layers, " + (
        f"{experts.value} experts, top-{flags['moe-router-topk'].value} routing" if experts else "dense"
    )
    header = {
        "id": name,
        "title": f"{name} ({model_type}, {shape})",
        "source": {
            "repo": "Hugging Face config.json",
            "path": str(config_path),
            "commit": f"sha256:{digest}",
            "note": f"Imported by `python -m harness model import`, mapped as {VIME_SCRIPTS}/{FAMILIES[model_type][1]} sets the flags; each flag's comment names its origin.",
        },
        "rendered-on": ["vime", "records"],
        "why": "VIME's train.py takes the architecture only from these flags; it checks them against this config.json at start-up.",
    }
    lines = [
        f"# {name}: Megatron architecture flags derived from a Hugging Face config.json (harness/spec/model_import.py).",
        "# Re-import rather than edit: the comment beside each flag says where its value came from.",
        yaml.safe_dump(header, sort_keys=False, width=10**6).rstrip(),
        "flags:",
    ]
    lines += [f"  {flag}: {_scalar(d.value)}  # {d.origin}" for flag, d in flags.items()]
    return "\n".join(lines) + "\n"


def import_model(config_path: Path, name: str, knobs_root: Path, force: bool = False) -> Path:
    """Write knobs_root/models/<name>.yaml from config_path and load it back through the model loader."""
    from harness.spec.models import load_model, model_path

    if not _NAME.match(name):
        raise SpecError(f"--name {name!r}: expected a file name of lower-case letters, digits, '.', '_' or '-' (it becomes knobs/models/<name>.yaml)")
    target = model_path(knobs_root, name)
    if target.exists() and not force:
        raise SpecError(f"{target}: exists; choose another --name, or pass --force to replace it")
    model_type, flags = derive(config_path)
    text = render_model_file(name, config_path, model_type, flags)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        tmp.replace(target)
        load_model(knobs_root, name)  # the loader takes it, or one line per problem
    except SpecError:
        target.unlink(missing_ok=True)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return target


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="model knob files (knobs/models/): import one from a Hugging Face config.json")
    verbs = parser.add_subparsers(dest="model_command", required=True, metavar="VERB")
    imp = verbs.add_parser(
        "import",
        help="derive VIME's architecture flags from a config.json into knobs/models/NAME.yaml",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("config", type=Path, help="a Hugging Face config.json (or the checkpoint directory holding it)")
    imp.add_argument("--name", required=True, help="the model's id: knobs/models/NAME.yaml; name it in base.yaml `model.vime` (or a site file)")
    imp.add_argument("--knobs", type=Path, default=None, help="knobs directory (default: this checkout's knobs/)")
    imp.add_argument("--force", action="store_true", help="replace an existing knobs/models/NAME.yaml")
    imp.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from harness import DEFAULT_KNOBS_DIR

    config = args.config / "config.json" if args.config.is_dir() else args.config
    path = import_model(config, args.name, args.knobs or DEFAULT_KNOBS_DIR, force=args.force)
    print(path)
    return 0
