"""The version of the code that executes a spec on the embedded backend.

A finished run is reused by its id; on the embedded backend the trainer is this repository's own
code, so the source of every harness module the trainer can execute is part of what the run is.
That set is computed from the imports, not listed by hand: a hand-kept list of folders missed
harness/operators (the trainer runs its logprob operators), so editing an operator kept the old
run id and old runs were reused as if the new code had made them. Judging code is not part of
the set: changing a check re-judges old runs without re-running them.

The walk reads the source (ast), it imports nothing: every ``import``/``from ... import`` in a
module, at any depth (lazy imports inside functions included), and every string literal that
names a harness module (modules started with ``python -m``, runpy or importlib by name, such as
the operator registry's implementations).
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

from harness import REPO_ROOT

PACKAGE = "harness"
# The programs a run executes: the trainer, the pre-imported interpreter that forks it, and the
# paired scorer (it rebuilds the trainer's engine and model to score a run's recorded tokens).
ENTRY_POINTS = ("harness.embedded.train", "harness.embedded.preloaded", "harness.embedded.paired_score")
# Source that runs without being imported by name: the engine server puts this folder on the vLLM
# processes' PYTHONPATH, where Python runs sitecustomize.py at start-up.
EXTRA_SOURCES = ("harness/embedded/engine_site/sitecustomize.py",)


def module_path(root: Path, name: str) -> Path | None:
    """The file of module ``name`` under ``root`` (a package's __init__.py), or None if none."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _named_modules(root: Path, path: Path, tree: ast.AST) -> set[str]:
    """Every module name ``tree`` refers to (imports and string literals); unresolved names included."""
    own = _module_name(root, path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            # ``from pkg import name``: name may be a submodule; one that is not resolves to nothing.
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(PACKAGE + "."):
            names.add(node.value)
    return names


def import_closure(root: Path, entry_points: tuple[str, ...] = ENTRY_POINTS, extra_sources: tuple[str, ...] = EXTRA_SOURCES) -> list[Path]:
    """The files of every harness module reachable from ``entry_points`` (and ``extra_sources``)
    by imports, under ``root``; each module's parent packages count too (importing a.b runs
    a/__init__.py). Sorted, so the digest does not depend on the walk order."""
    seen: set[Path] = set()
    pending: list[Path] = [root / extra for extra in extra_sources]
    for name in entry_points:
        path = module_path(root, name)
        if path is None:
            raise FileNotFoundError(f"{root}: entry point {name} has no source file")
        pending.append(path)
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name in _named_modules(root, path, tree):
            if name != PACKAGE and not name.startswith(PACKAGE + "."):
                continue
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                found = module_path(root, ".".join(parts[:depth]))
                if found is not None and found not in seen:
                    pending.append(found)
    return sorted(seen)


def code_version(root: Path) -> str:
    digest = hashlib.sha256()
    for path in import_closure(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@lru_cache(maxsize=1)
def embedded_code_version() -> str:
    return code_version(REPO_ROOT)
