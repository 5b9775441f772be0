"""The backends a run can be made or found on, one module each, found by name.

A backend is a `Backend` (harness.spec.backends.base): what it is (the knob files' section it
reads, whether it runs on a cluster, whether it launches, whether its trainer is this repository's
code) and the few things only it knows (the program that trains, the flags that point that
program's outputs into the run directory, how many of its runs go at once). The rest of the code
asks a backend these questions; it never compares a backend's name to a string.

Adding a backend is adding one module to this package that defines `BACKEND` (records.py is the
smallest example: docs/architecture.md, "Adding a backend"); it is found by its module name.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from harness.spec.backends.base import Backend
from harness.spec.errors import SpecError

__all__ = ["Backend", "backend", "names", "of_run"]


@cache
def _registry() -> dict[str, Backend]:
    found = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base":
            continue
        defined = getattr(importlib.import_module(f"{__name__}.{module.name}"), "BACKEND", None)
        if isinstance(defined, Backend):
            found[defined.name] = defined
    return found


def names() -> tuple[str, ...]:
    """Every backend's name, the embedded one first (the default), then by name."""
    return tuple(sorted(_registry(), key=lambda name: (name != "embedded", name)))


def of_run(name: str | None) -> Backend | None:
    """The backend a recorded run names, None when it names none this harness knows (an old or foreign record)."""
    return _registry().get(name) if name else None


def backend(name: str) -> Backend:
    """The backend called `name`; SpecError naming the choices otherwise."""
    try:
        return _registry()[name]
    except KeyError:
        raise SpecError(f"--backend: expected one of {', '.join(names())}, got {name!r}") from None
