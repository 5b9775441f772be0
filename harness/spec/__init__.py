"""The experiment spec: knob files -> typed objects -> a resolved RunSpec -> VIME argv."""

from harness.spec.errors import KnobError, SpecError
from harness.spec.load import Knobs, load_knobs
from harness.spec.render import parse_argv, render_argv
from harness.spec.resolve import RunSpec, resolve
from harness.spec.validate import validate

__all__ = [
    "KnobError",
    "SpecError",
    "Knobs",
    "load_knobs",
    "parse_argv",
    "render_argv",
    "RunSpec",
    "resolve",
    "validate",
]
