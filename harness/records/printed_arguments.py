"""VIME's argument print as a run's resolved flags.

VIME's driver prints every argument once at start (Megatron's `_print_args`: `  name ..... value`,
values as Python prints them), after its own defaults and validations ran: what actually ran, not
what a launcher meant. An ingested run keeps it as its flags, so two ingested runs are compared on
their workload (harness.judge.ab) and a precision or placement is read from the run itself.

A printed name is the argument's `dest` (`rollout_top_p`); as a flag it is written with dashes
(`rollout-top-p`), as knobs/ and the flag table write flags. A few dests differ from their flag
(`--disable-rollout-global-dataset` prints `rollout_global_dataset`); those keep the dest's name.
Values: `True` is a switch that is on; `False` and `None` are absent (as a rendered argv leaves
them out); numbers, lists and tuples are read as Python literals; anything else stays text.
"""

from __future__ import annotations

from harness.records.pyliteral import LiteralSyntaxError, parse_literal
from harness.spec.render import parse_value


def printed_value(text: str):
    """One printed value as a flag value (None: the argument is off or unset)."""
    text = text.strip()
    if text in ("False", "None", ""):
        return None
    if text == "True":
        return True
    if text[:1] in "[(" and text[-1:] in "])":
        try:
            value = parse_literal(text)
        except LiteralSyntaxError:
            return text
        items = list(value) if isinstance(value, (list, tuple)) else None
        if items is not None and all(isinstance(v, (bool, int, float, str)) for v in items):
            return items or None
        return text
    value = parse_value(text)
    return value if not isinstance(value, bool) else value or None


def flags_from_arguments(arguments: dict[str, str]) -> dict:
    """name -> value text as printed  =>  flag -> value, dropping what is off or unset."""
    flags = {}
    for name, text in sorted(arguments.items()):
        value = printed_value(text)
        if value is not None:
            flags[name.replace("_", "-")] = value
    return flags
