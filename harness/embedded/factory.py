"""Build (once) and find (always) the miniature's model and prompt set.

``ensure_model(name)`` and ``ensure_prompts(name)`` return a directory / file built from the named
recipe, cached under ``$LAB_CACHE_DIR`` (default ``<repo>/.cache/embedded``) by the recipe's hash.
Builds are deterministic, run under a file lock (parallel runs share one build) and land
atomically (a build that dies leaves no half-written entry).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from filelock import FileLock

from harness.embedded import task
from harness.recipes import DATA_RECIPES, MODEL_RECIPES, URI_PREFIX, recipe_hash

REPO_ROOT = Path(__file__).resolve().parents[2]


class UnknownRecipe(ValueError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("LAB_CACHE_DIR", REPO_ROOT / ".cache" / "embedded"))


def resolve(value: str, kind: str) -> Path:
    """A flag value: a real path, or ``embedded://<kind>/<recipe>`` built on demand."""
    if not value.startswith(URI_PREFIX):
        return Path(value)
    got_kind, _, name = value[len(URI_PREFIX) :].partition("/")
    if got_kind != kind:
        raise UnknownRecipe(f"{value}: expected embedded://{kind}/<recipe>")
    return ensure_model(name) if kind == "model" else ensure_prompts(name)


def _lookup(table: dict, name: str, kind: str):
    if name not in table:
        raise UnknownRecipe(f"embedded://{kind}/{name}: unknown recipe; known: {sorted(table)}")
    return table[name]


def _build_once(target: Path, build) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.exists():
            return target
        staging = target.with_name(target.name + ".building")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        build(staging)
        staging.rename(target)
    return target


def ensure_prompts(name: str) -> Path:
    recipe = _lookup(DATA_RECIPES, name, "data")
    entry = cache_dir() / "data" / f"{name}-{recipe_hash(recipe)}"

    def build(out: Path) -> None:
        with open(out / "prompts.jsonl", "w") as fh:
            for row in task.prompt_rows(recipe.task):
                fh.write(json.dumps(row) + "\n")
        (out / "recipe.json").write_text(json.dumps({"name": name, "hash": recipe_hash(recipe)}))

    return _build_once(entry, build) / "prompts.jsonl"


def ensure_model(name: str) -> Path:
    recipe = _lookup(MODEL_RECIPES, name, "model")
    entry = cache_dir() / "models" / f"{name}-{recipe_hash(recipe)}"

    def build(out: Path) -> None:
        from harness.embedded.model_build import build_model  # torch import only when building

        build_model(recipe, out)

    return _build_once(entry, build)


def model_recipe_info(path: Path) -> dict:
    """The recipe record a built model carries (empty for a checkpoint from elsewhere)."""
    record = path / "lab_recipe.json"
    return json.loads(record.read_text()) if record.exists() else {}
