"""Which flags say what a run computes, and which only say where its records go.

A run's id hashes what it computes (harness.spec.resolve.RunSpec.spec_hash), so turning W&B on,
renaming a project or pointing TensorBoard elsewhere reuses a finished run instead of relaunching
it (a P1 run is a day of GPU time). The same split tells an A/B's contract which differences
between two runs' printed arguments are not differences of workload (harness.judge.ab).
"""

from __future__ import annotations

# Where metrics are sent: VIME's W&B and TensorBoard flags (vime/utils/arguments.py
# add_wandb_arguments, add_tensorboard_arguments) and Megatron's own logging destinations.
TRACKING_FLAGS = frozenset(
    {
        "use-wandb",
        "wandb-project",
        "wandb-mode",
        "wandb-group",
        "wandb-dir",
        "wandb-key",
        "wandb-host",
        "wandb-team",
        "wandb-run-id",
        "wandb-exp-name",
        "wandb-save-dir",
        "disable-wandb-random-suffix",
        "wandb-always-use-train-step",
        "use-tensorboard",
        "tensorboard-dir",
        "tb-project-name",
        "tb-experiment-name",
        "log-passrate",
        "log-multi-turn",
        "log-correct-samples",
        "log-reward-category",
    }
)
# Where a run writes its dumps, checkpoints and profiles: each run's own paths.
OUTPUT_FLAGS = frozenset(
    {
        "save-debug-rollout-data",
        "save-debug-train-data",
        "dump-details",
        "save",
        "save-hf",
        "save-interval",
        "memory-snapshot-dir",
        "memory-snapshot-path",
        "ci-save-grad-norm",
    }
)
NOT_WHAT_RUNS = TRACKING_FLAGS | OUTPUT_FLAGS


def computed_flags(flags: dict) -> dict:
    """The flags that decide what a run computes (its id hashes these)."""
    return {name: value for name, value in flags.items() if name not in NOT_WHAT_RUNS}
