"""`python -m harness model import CONFIG_JSON --name NAME`: a Hugging Face config.json -> knobs/models/NAME.yaml.

VIME takes a model's architecture only from Megatron flags, which its launch scripts source from
`scripts/models/<model>.sh`; at start-up it checks them against the checkpoint's config.json. This
derives the same flags from the config.json, family by family, the way those scripts set them
(vllm-project/vime scripts/models/: qwen3-8B.sh for dense Qwen3, qwen3-30B-A3B.sh and
qwen3-235B-A22B.sh for Qwen3-MoE, deepseek-v3.sh for DeepSeek-V3 (MLA, without the flash attention
backend), llama3.1-8B-Instruct.sh for Llama, glm4.5-106B-A12B.sh for GLM-4-MoE, all at b332ffc, and
qwen3-next-80B-A3B.sh at 40ec17a for Qwen3-Next's gated attention: harness/spec/model_families.py),
and writes a model knob file in the format the loader
reads (harness/spec/models.py), each flag with a comment naming where its value came from: a
config.json key, or the script's constant. A family it does not know, or a config value the
scripts never meet (biases, rope scaling on Qwen3, a non-SiLU MLP), is one error line naming the
file and key: guessing an architecture would render a model VIME then refuses, or worse, accepts.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

import yaml

from harness.spec.errors import SpecError
from harness.spec.model_families import FAMILIES, SCRIPT_COMMITS, VIME_SCRIPTS, Derived, HFConfig

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


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
            "note": f"Imported by `python -m harness model import`, mapped as {SCRIPT_COMMITS.get(model_type, VIME_SCRIPTS)}/{FAMILIES[model_type][1]} sets the flags; each flag's comment names its origin.",
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
