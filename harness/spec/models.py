"""Model architectures as data: knobs/models/<id>.yaml, the Megatron flags a model needs.

VIME's launch scripts source a model's architecture flags from `scripts/models/<model>.sh`; here
the same flags are a knob file naming its source and commit. base.yaml's `model` picks one per
backend, and the file's `rendered-on` says which backends receive the flags (a trainer that takes
its architecture from the checkpoint itself does not).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field

from harness.spec import backends
from harness.spec.errors import SpecError
from harness.spec.schema import Backend, FlagValue, Strict, check_flag_names
from harness.spec.values import PLACEHOLDER_PREFIX, flag_value_problems


class Source(Strict):
    """Where values were read: a repository, a path in it and the commit read."""

    repo: str
    path: str
    commit: str
    note: str = ""


# Flags that only mean something for a mixture-of-experts model. base.yaml sets them for its MoE
# model; a dense model removes them (Megatron stops at --expert-model-parallel-size > 1 without
# --num-experts, and vLLM's expert parallelism and DeepEP all-to-all have no experts to place).
EXPERT_ONLY_FLAGS = ("vllm-enable-expert-parallel", "vllm-all2all-backend", "expert-model-parallel-size", "expert-tensor-parallel-size")
# Flags a rung may set that need one (VIME replays the routed experts vLLM returns per token).
MOE_ONLY_RUNG_FLAGS = ("use-rollout-routing-replay", "use-routing-replay")


class ModelFile(Strict):
    id: str
    title: str
    source: Source
    rendered_on: list[Backend] = Field(alias="rendered-on")
    why: str = Field(min_length=10)
    # The name its checkpoints carry in knobs/' placeholders (`/path/to/<checkpoint>-FP8`); the id
    # when absent. A site gives the real paths under these names (docs/models.md).
    checkpoint: str | None = None
    flags: dict[str, FlagValue] = Field(min_length=1)

    @property
    def checkpoint_name(self) -> str:
        return self.checkpoint or self.id

    def model_post_init(self, _context) -> None:
        check_flag_names(self.flags)

    @property
    def is_moe(self) -> bool:
        experts = self.flags.get("num-experts")
        return isinstance(experts, int) and not isinstance(experts, bool) and experts > 0


def model_path(knobs_root: Path, model_id: str) -> Path:
    return Path(knobs_root) / "models" / f"{model_id}.yaml"


@lru_cache(maxsize=16)
def _load(path: Path, mtime: float) -> ModelFile:
    from harness.spec.load import _relative, parse_file

    model = parse_file(path, ModelFile)
    name = _relative(path)
    problems = flag_value_problems(name, "flags.", model.flags)
    if model.id != path.stem:
        problems.append(f"{name}: id: expected the file's name {path.stem!r}, got {model.id!r}")
    if problems:
        raise SpecError(problems)
    return model


def load_model(knobs_root: Path, model_id: str) -> ModelFile:
    """knobs/models/<model_id>.yaml, parsed once per file version."""
    path = model_path(knobs_root, model_id)
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        raise SpecError(
            f"{Path(knobs_root) / 'base.yaml'}: model: expected a model file in {path.parent} (known: {', '.join(known) or 'none'}), got {model_id!r}"
        )
    return _load(path, path.stat().st_mtime)


def model_for(knobs, backend: str) -> ModelFile | None:
    """The model the spec names for `backend` (records runs are VIME runs): the site's `model:` on
    a cluster backend, else base.yaml's; None if unnamed."""
    choice = knobs.base.model
    site_model = getattr(knobs.site, "model", None) if backends.backend(backend).on_cluster else None
    if site_model is not None:
        return load_model(knobs.root, site_model)
    if choice is None:
        return None
    return load_model(knobs.root, getattr(choice, backends.backend(backend).knob_section))


def rename_placeholders(knobs, flags: dict, provenance: dict[str, str], backend: str) -> None:
    """knobs/' placeholders name the checkpoints of one model (base.yaml `model.placeholders`). On a
    cluster running another model they are renamed to that model's (`/path/to/Qwen3-30B-A3B-FP8` ->
    `/path/to/qwen3-8b-FP8`), so a site must give that model's paths: one model's checkpoint
    never reaches another model's run unsaid."""
    choice = knobs.base.model
    if not backends.backend(backend).on_cluster or choice is None or choice.placeholders is None:
        return
    model = model_for(knobs, backend)
    written_for = load_model(knobs.root, choice.placeholders)
    if model is None or model.id == written_for.id:
        return
    old, new = PLACEHOLDER_PREFIX + written_for.checkpoint_name, PLACEHOLDER_PREFIX + model.checkpoint_name
    for name, value in list(flags.items()):
        if isinstance(value, str) and value.startswith(old):
            flags[name] = new + value[len(old) :]
            provenance[name] = f"{provenance.get(name, '?')} (placeholder renamed for model {model.id})"


def model_flags(knobs, backend: str) -> tuple[str, dict[str, FlagValue]]:
    """(layer name, flags) to merge for `backend`: empty where the model is not rendered there. A
    dense model's layer also removes the expert-only flags (None deletes a flag in a layer)."""
    model = model_for(knobs, backend)
    if model is None or not backends.backend(backend).named_in(model.rendered_on):
        return "", {}
    dense = {} if model.is_moe else dict.fromkeys(EXPERT_ONLY_FLAGS)
    return f"model:{model.id}", {**dense, **model.flags}


def dense_model_skip(knobs, rung, backend: str) -> str | None:
    """Why `rung` is not run on `backend`'s model when that model is dense and the rung needs an MoE
    (it, or a rung above it, sets an MoE-only flag; or it is the baseline of rungs that all do)."""
    model = model_for(knobs, backend)
    if model is None or not backends.backend(backend).named_in(model.rendered_on) or model.is_moe:
        return None
    need = _needs_moe(knobs, rung.id, backend)
    if need is None:
        return None
    from harness.spec.load import _relative

    return (
        f"{_relative(Path(knobs.root) / 'ladder' / f'{rung.id}.yaml')}: needs a mixture-of-experts model ({need}); "
        f"the {backend} model is {model.id} ({_relative(model_path(knobs.root, model.id))}), which is dense"
    )


def _needs_moe(knobs, rung_id: str, backend: str) -> str | None:
    for ancestor in knobs.chain(rung_id):
        for section in ancestor.changes.for_backend(backend):
            for flag in MOE_ONLY_RUNG_FLAGS:
                if section.get(flag):
                    return f"ladder/{ancestor.id}.yaml sets --{flag}"
    children = [r.id for r in knobs.rungs.values() if r.parent == rung_id]
    if children and all(_needs_moe(knobs, child, backend) for child in children):
        return f"it is the baseline of {', '.join(children)}, which need one"
    return None
