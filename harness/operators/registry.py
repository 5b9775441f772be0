"""The operator registry: built-in implementations plus plug-ins found through entry points.

A plug-in (say a Blackwell kernel in its own package) declares in its pyproject::

    [project.entry-points."vime_mismatch_lab.operators"]
    b200-fused-logprob = "my_pkg.ops:B200FusedLogprob"

where the object is an :class:`~harness.operators.contract.Operator` subclass (or a zero-argument
factory returning an instance). The bench then measures it beside the built-ins, unchanged.

Each operator computes one boundary of the forward, named by its class's ``boundary``: the
selected-token log-prob of the LM head (``Operator``, the default everywhere a name is listed) or
the FP8-weight linear layer (``harness.operators.linear_contract.LinearOperator``). A plug-in for
either registers the same way; ``names(boundary)`` lists one boundary's operators, ``get`` finds any.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points

from harness.operators.contract import SELECTED_LOGPROB_BOUNDARY, Operator

ENTRY_POINT_GROUP = "vime_mismatch_lab.operators"

# Modules that register the built-in operators when imported. Kept as names so that importing the
# registry stays cheap and a broken optional module cannot hide the others.
_BUILTIN_MODULES = (
    "harness.operators.impl_reference",
    "harness.operators.impl_megatron",
    "harness.operators.impl_vllm",
    "harness.operators.impl_fp8",
    "harness.operators.impl_liger",
    "harness.operators.impl_cce",
    "harness.operators.impl_quack",
    "harness.operators.impl_fused",
    "harness.operators.impl_linear",
)

_factories: dict[str, Callable[[], Operator]] = {}
_instances: dict[str, Operator] = {}
_load_errors: dict[str, str] = {}
_loaded = False


class UnknownOperator(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; say it plainly
        return self.args[0]


def register(name: str, factory: Callable[[], Operator] | None = None):
    """Register ``factory`` (an Operator subclass or a callable returning one) under ``name``.

    Usable as a decorator: ``@register("fp64-reference")`` above the class.
    """

    def _add(f: Callable[[], Operator]):
        if name in _factories and _factories[name] is not f:
            raise ValueError(f"operator name {name!r} is registered twice ({_factories[name]!r} and {f!r})")
        _factories[name] = f
        return f

    return _add(factory) if factory is not None else _add


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            register(ep.name, ep.load())
        except Exception as exc:  # a broken plug-in is reported by names_with_errors(), not fatal
            _load_errors[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"


def boundary_of(name: str) -> str:
    """The boundary the operator NAME computes (its class's ``boundary``; an instance is built only
    for a factory that is not a class)."""
    factory = _factories[name]
    boundary = getattr(factory, "boundary", None) if isinstance(factory, type) else None
    return boundary or getattr(get(name), "boundary", SELECTED_LOGPROB_BOUNDARY)


def names(boundary: str = SELECTED_LOGPROB_BOUNDARY) -> list[str]:
    """Every registered operator name of one boundary (built-in and plug-in; the LM head's selected
    log-prob unless asked), whether or not it can run here."""
    _load_all()
    return sorted(name for name in _factories if boundary_of(name) == boundary)


def boundaries() -> list[str]:
    """The boundaries some registered operator computes."""
    _load_all()
    return sorted({boundary_of(name) for name in _factories})


def plugin_errors() -> dict[str, str]:
    """Entry points that failed to load, name -> one-line reason."""
    _load_all()
    return dict(_load_errors)


def get(name: str) -> Operator:
    """The operator registered under ``name`` (one shared instance per name)."""
    _load_all()
    if name not in _factories:
        raise UnknownOperator(f"no operator named {name!r}; registered: {', '.join(sorted(_factories))}")
    if name not in _instances:
        op = _factories[name]()
        op.name = name
        _instances[name] = op
    return _instances[name]


def available_names(boundary: str = SELECTED_LOGPROB_BOUNDARY) -> list[str]:
    """Names of one boundary's operators that can run on this machine."""
    return [n for n in names(boundary) if get(n).available()[0]]
