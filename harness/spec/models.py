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

from harness.spec.errors import SpecError
from harness.spec.schema import Backend, FlagValue, Strict, check_flag_names
from harness.spec.values import flag_value_problems


class Source(Strict):
    """Where values were read: a repository, a path in it and the commit read."""

    repo: str
    path: str
    commit: str
    note: str = ""


class ModelFile(Strict):
    id: str
    title: str
    source: Source
    rendered_on: list[Backend] = Field(alias="rendered-on")
    why: str = Field(min_length=10)
    flags: dict[str, FlagValue] = Field(min_length=1)

    def model_post_init(self, _context) -> None:
        check_flag_names(self.flags)


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
    """The model the spec names for `backend` (records runs are VIME runs), or None if unnamed."""
    choice = knobs.base.model
    if choice is None:
        return None
    return load_model(knobs.root, choice.embedded if backend == "embedded" else choice.vime)


def model_flags(knobs, backend: str) -> tuple[str, dict[str, FlagValue]]:
    """(layer name, flags) to merge for `backend`: empty where the model is not rendered there."""
    model = model_for(knobs, backend)
    if model is None or backend not in model.rendered_on:
        return "", {}
    return f"model:{model.id}", dict(model.flags)
