"""Rungs the planted-fault controls run that the ladder does not name: a ladder rung with flags set
(tools/control_sizes.py calibrates on them, tests/attribution/test_budget_controls.py judges on them).
"""

from __future__ import annotations

VARIANTS: dict[str, tuple[str, dict]] = {
    # the MoE model at bf16, without filters: its expert fault is then the only thing to localise
    "moe-bf16": ("fp8-plus-filters-moe", {"vllm-quantization": None, "rollout-top-p": 1.0, "rollout-top-k": -1}),
    # top-p with four times the prompts a rollout: the filter's bf16 fault acts only where the running
    # sum lands near the edge, so its own drift needs many more tokens than a fault that moves them all
    "top-p-wide": ("top-p", {"rollout-batch-size": 32, "global-batch-size": 128}),
    # the recommended baseline (fp8 rollout, top-k 40 then top-p) as wide: there the filter's running sum
    # adds at most 40 probabilities, so its bf16 fault barely acts (8 tokens of ~100,000 moved at 7001)
    "fp8-plus-filters-wide": ("fp8-plus-filters", {"rollout-batch-size": 32, "global-batch-size": 128}),
    # the fp8 rung with top-p alone, as wide: the filter's fault on an fp8 rung, its running sum over the
    # whole vocabulary as on top-p-wide
    "fp8-top-p-wide": ("fp8-rollout", {"rollout-top-p": 0.95, "rollout-batch-size": 32, "global-batch-size": 128}),
}


def resolve(rung: str) -> tuple[str, dict]:
    """(the ladder rung, the flags set on it) of a control's rung: a ladder rung is itself, no flags."""
    return VARIANTS.get(rung, (rung, {}))
