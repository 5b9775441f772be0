"""Typed reads of one VIME flag from a flag table (a resolved spec's, a recorded spec's, a parsed argv's).

One reader for every layer above spec/, so a flag's value is interpreted one way: a switch is on
only when it is `true` (or a string VIME's argparse would take as true), a count is an int and never
a bool, a text value is its string form and absent when null. A caller never guesses from
truthiness (`flags.get("num-rollout")` of `0` and of `None` are different answers).
"""

from __future__ import annotations

from collections.abc import Mapping

_TRUE_WORDS = ("true", "1", "yes")


def flag_value(flags: Mapping, name: str, default=None):
    """A flag's value as the table holds it (scalar or list); `default` when absent or null."""
    value = flags.get(name)
    return default if value is None else value


def is_on(flags: Mapping, name: str) -> bool:
    """A store_true switch (`--use-wandb`, `--bf16`, `--colocate`): set to true."""
    value = flags.get(name)
    return value is True or (isinstance(value, str) and value.lower() in _TRUE_WORDS)


def int_flag(flags: Mapping, name: str) -> int | None:
    """A whole-number flag (`--num-rollout`); None when absent, null or not an int."""
    value = flags.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number_flag(flags: Mapping, name: str, default: float | None = None) -> float | None:
    """A numeric flag (`--rollout-temperature`, `--rollout-top-p`) as a float; `default` when absent or null."""
    value = flags.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        raise ValueError(f"flag {name}: expected a number, got {value!r}")
    return float(value)


def text_flag(flags: Mapping, name: str) -> str | None:
    """A flag's value as text (`--wandb-project`, `--vllm-dtype`); None when absent, null, a switch or empty."""
    value = flags.get(name)
    if value is None or isinstance(value, bool):
        return None
    text = str(value)
    return text or None
