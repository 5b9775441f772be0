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
}


def resolve(rung: str) -> tuple[str, dict]:
    """(the ladder rung, the flags set on it) of a control's rung: a ladder rung is itself, no flags."""
    return VARIANTS.get(rung, (rung, {}))
