"""Flags are read through harness.spec.flag_read: one interpretation of a switch, a count, a number
and a text value for every layer, and no `flags.get(...)` truthiness guesses outside spec/."""

import ast
from pathlib import Path

import pytest

from harness.spec.flag_read import flag_value, int_flag, is_on, number_flag, text_flag

ROOT = Path(__file__).resolve().parents[2]


def test_a_switch_is_on_only_when_true():
    flags = {"bf16": True, "fp16": False, "colocate": "true", "use-wandb": "0", "use-tensorboard": None, "num-rollout": 1}
    assert is_on(flags, "bf16") and is_on(flags, "colocate")
    assert not any(is_on(flags, name) for name in ("fp16", "use-wandb", "use-tensorboard", "num-rollout", "absent"))


def test_a_count_is_an_int_and_zero_is_not_absent():
    flags = {"num-rollout": 0, "seed": 2026, "bf16": True, "rollout-top-p": 0.9}
    assert int_flag(flags, "num-rollout") == 0 and int_flag(flags, "seed") == 2026
    assert int_flag(flags, "bf16") is None and int_flag(flags, "rollout-top-p") is None and int_flag(flags, "absent") is None


def test_numbers_text_and_raw_values():
    flags = {"rollout-temperature": 0.7, "rollout-top-k": 20, "vllm-dtype": "bfloat16", "use-wandb": True, "eval-data": ["a", "b"], "x": ""}
    assert number_flag(flags, "rollout-temperature") == 0.7 and number_flag(flags, "rollout-top-k") == 20.0
    assert number_flag(flags, "rollout-top-p", 1.0) == 1.0
    with pytest.raises(ValueError, match="use-wandb"):
        number_flag(flags, "use-wandb")
    assert text_flag(flags, "vllm-dtype") == "bfloat16" and text_flag(flags, "use-wandb") is None and text_flag(flags, "x") is None
    assert flag_value(flags, "eval-data") == ["a", "b"] and flag_value(flags, "absent", "auto") == "auto"


def _flag_table_gets(source: str, label: str) -> list[str]:
    """`flags.get(...)`, `spec_flags.get(...)` and `<x>.flags.get(...)` calls in one module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
            if name in ("flags", "spec_flags"):
                found.append(f"{label}:{node.lineno}")
    return found


def test_no_flag_table_is_read_with_get_outside_spec():
    modules = [p for folder in ("harness", "fixtures", "tools") for p in (ROOT / folder).rglob("*.py") if "harness/spec/" not in p.as_posix()]
    offenders = [where for path in modules for where in _flag_table_gets(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not offenders, f"read flags through harness.spec.flag_read (is_on, int_flag, number_flag, text_flag, flag_value): {offenders}"


def test_the_scan_finds_each_spelling():
    source = "def f(spec, flags, spec_flags):\n    return spec.flags.get('seed'), flags.get('bf16'), spec_flags.get('x'), other.get('y')\n"
    assert _flag_table_gets(source, "planted") == ["planted:2", "planted:2", "planted:2"]
