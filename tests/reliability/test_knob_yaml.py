"""The knob loader refuses what PyYAML would silently accept, and still reads what YAML allows."""

from __future__ import annotations

import pytest
import yaml

from harness import DEFAULT_KNOBS_DIR
from harness.spec import load_knobs
from harness.spec.load import MAX_EXPANDED_NODES, load_yaml_text
from harness.spec.values import value_problem


def test_the_project_knobs_load_with_their_aliases():
    knobs = load_knobs(DEFAULT_KNOBS_DIR)  # stages.yaml shares its embedded profile by alias
    assert knobs.stages and knobs.rungs


def test_a_merge_key_then_an_explicit_key_is_an_override_not_a_repeat():
    assert load_yaml_text("base: &b {a: 1, c: 3}\nx:\n  <<: *b\n  a: 2\n")["x"] == {"a": 2, "c": 3}


def test_a_repeated_key_names_both_lines():
    with pytest.raises(yaml.YAMLError, match=r"key 'a' given twice \(lines 2 and 4\)"):
        load_yaml_text("x:\n  a: 1\n  b: 2\n  a: 3\n")


def test_aliases_that_expand_past_the_bound_are_refused_quickly():
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    with pytest.raises(yaml.YAMLError, match=f"past {MAX_EXPANDED_NODES} nodes"):
        load_yaml_text("\n".join(levels))


@pytest.mark.parametrize(
    "name, value, fragment",
    [
        ("num-rollout", "three", "a whole number >= 1"),
        ("num-rollout", 0, "a whole number >= 1"),
        ("n-samples-per-prompt", -1, "a whole number >= 1"),
        ("rollout-batch-size", float("inf"), "finite"),
        ("seed", 2**63, "within int64"),
        ("seed", -1, ">= 0"),
        ("vllm-gpu-memory-utilization", 1.2, "[0, 1]"),
        ("global-batch-size", True, "a number"),
    ],
)
def test_value_rules_name_the_rule(name, value, fragment):
    assert fragment in value_problem(name, value)


@pytest.mark.parametrize(
    "name, value",
    [
        ("num-rollout", 3),
        ("seed", 0),
        ("rollout-top-p", 0.95),
        ("hf-checkpoint", "/path"),
        ("colocate", True),
        ("num-rollout", None),
        ("vllm-gpu-memory-utilization", 0.5),
        ("rollout-top-k", -1),
    ],
)
def test_good_values_pass(name, value):
    assert value_problem(name, value) is None
