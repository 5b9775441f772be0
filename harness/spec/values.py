"""Check each flag value where it is written, before anything is merged or rendered.

VIME parses its argv with argparse's `type=int` / `type=float`, so a count written as a word stops
it at start-up, while a negative count, zero samples per prompt, an infinite float or an integer
beyond int64 get through argparse and go wrong later (or silently: Megatron's `range(-3)` is
empty). Each problem is one line: file, key, value, and the rule it breaks.

The rules are per flag name. Counts are the flags VIME loops over, divides by or multiplies into
GPU counts: they must be whole numbers >= 1. Fractions are probabilities or memory shares.
"""

from __future__ import annotations

import math

from harness.spec.errors import shown

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# How the seed's knobs mark a path each site must give (base.yaml, ladder/*.yaml; harness/spec/site.py).
PLACEHOLDER_PREFIX = "/path/to/"

# Whole numbers >= 1: VIME and Megatron divide by these or loop over them.
POSITIVE_COUNTS = frozenset(
    {
        "num-rollout",
        "num-epoch",
        "rollout-batch-size",
        "n-samples-per-prompt",
        "global-batch-size",
        "num-steps-per-rollout",
        "micro-batch-size",
        "rollout-max-response-len",
        "rollout-max-prompt-len",
        "max-tokens-per-gpu",
        "tensor-model-parallel-size",
        "pipeline-model-parallel-size",
        "context-parallel-size",
        "expert-model-parallel-size",
        "expert-tensor-parallel-size",
        "actor-num-nodes",
        "actor-num-gpus-per-node",
        "rollout-num-gpus-per-engine",
        "num-experts",
        "recompute-num-layers",
        "embedded-probe-samples",
    }
)
# Whole numbers >= 0: a seed, or a GPU count that colocate mode may leave at 0.
NON_NEGATIVE_COUNTS = frozenset({"seed", "rollout-seed", "rollout-num-gpus"})
# Numbers in [0, 1]: dropout probabilities and the share of GPU memory vLLM may take.
FRACTIONS = frozenset({"attention-dropout", "hidden-dropout", "vllm-gpu-memory-utilization"})


def value_problem(name: str, value: object) -> str | None:
    """The rule `value` breaks as the value of flag `--name`, or None. Types first, then ranges."""
    numeric = name in POSITIVE_COUNTS or name in NON_NEGATIVE_COUNTS or name in FRACTIONS
    if value is None:
        return None  # null removes the flag an earlier layer set
    if isinstance(value, list):
        if numeric:
            return f"expected one number, got a list {shown(value)}"
        if not value:
            return "expected one or more values, got an empty list (null removes the flag)"
        return next((f"item {i}: {problem}" for i, item in enumerate(value) if (problem := value_problem(name, item))), None)
    if isinstance(value, bool):
        return f"expected a number, got the switch value {value!r}" if numeric else None
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r} (YAML reads 1.0e+400 and .inf as infinity)"
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"expected a value within int64 (|x| < 2**63), got {shown(value)}"
    if name in POSITIVE_COUNTS or name in NON_NEGATIVE_COUNTS:
        lowest = 1 if name in POSITIVE_COUNTS else 0
        rule = "a whole number >= 1 (a count)" if lowest else "a whole number >= 0"
        if not isinstance(value, int):
            return f"expected {rule}, got {shown(value)} (type={type(value).__name__})"
        if value < lowest:
            return f"expected {rule}, got {value}"
    if name in FRACTIONS:
        if not isinstance(value, (int, float)) or not 0 <= value <= 1:
            return f"expected a number in [0, 1], got {shown(value)} (type={type(value).__name__})"
    return None


def flag_value_problems(where: str, key_prefix: str, flags: dict) -> list[str]:
    """One line per bad value in one flag section: `where: key_prefix.name: expected ...`."""
    problems = []
    for name, value in flags.items():
        problem = value_problem(name, value)
        if problem:
            problems.append(f"{where}: {key_prefix}{name}: {problem}")
    return problems
