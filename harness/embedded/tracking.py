"""Metric tracking the way VIME does it: `--use-wandb` and `--use-tensorboard`.

VIME's `init_tracking` starts a W&B run on the driver and its `log(args, metrics, step_key)` sends
each logged dict to `wandb.log` (the step key, `train/step` or `rollout/step`, inside the dict; the
other keys plotted against it through `define_metric`) and to a TensorBoard `SummaryWriter`
(`add_scalar(key, value, metrics[step_key])` for every other key). The embedded trainer does the
same so CI exercises the path end to end. W&B is offline unless `--wandb-mode`/`WANDB_MODE` says
otherwise: no network here, and an embedded run has nothing to publish.

Both are off unless asked for; they only add outputs (a `wandb/` run directory, TensorBoard
event files), never change the run's numbers or its log lines.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# Which step key each metric group is plotted against (VIME's define_metric calls).
_STEP_OF_GROUP = {"train": "train/step", "rollout": "rollout/step", "perf": "rollout/step", "eval": "eval/step"}


class Tracking:
    def __init__(self, values: dict, output_dir: str | None) -> None:
        self.wandb_run = None
        self.tb_writer = None
        base = Path(output_dir) if output_dir else Path.cwd()
        if values.get("use-wandb"):
            self.wandb_run = _init_wandb(values, base)
        if values.get("use-tensorboard"):
            from torch.utils.tensorboard import SummaryWriter

            tb_dir = values.get("tensorboard-dir") or os.environ.get("TENSORBOARD_DIR") or str(base / "tensorboard")
            self.tb_writer = SummaryWriter(log_dir=tb_dir)

    def log(self, metrics: dict, step_key: str, step: int) -> None:
        if self.wandb_run is None and self.tb_writer is None:
            return
        logged = {**metrics, step_key: step}
        if self.wandb_run is not None:
            self.wandb_run.log(logged)
        if self.tb_writer is not None:
            for key, value in metrics.items():
                if key != step_key and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.tb_writer.add_scalar(key, value, step)  # nan/inf are written as they are
            self.tb_writer.flush()

    def finish(self, exit_code: int = 0) -> None:
        """VIME's finish_tracking: close the W&B run (offline: its files are complete) and the writer."""
        if self.tb_writer is not None:
            self.tb_writer.close()
            self.tb_writer = None
        if self.wandb_run is not None:
            self.wandb_run.finish(exit_code=exit_code)
            self.wandb_run = None


def _init_wandb(values: dict, base: Path):
    import wandb

    mode = values.get("wandb-mode") or os.environ.get("WANDB_MODE") or "offline"
    wandb_dir = Path(values.get("wandb-dir") or base)
    wandb_dir.mkdir(parents=True, exist_ok=True)
    config = {k.replace("-", "_"): v for k, v in values.items() if not (isinstance(v, float) and not math.isfinite(v))}
    run = wandb.init(
        project=values.get("wandb-project") or "vime-embedded",
        group=values.get("wandb-group"),
        dir=str(wandb_dir),
        mode=mode,
        config=config,
        # console off: the launcher already keeps the log; wandb still prints its own banner (the run
        # directory, or the URL when online), which is how a log names its W&B run.
        settings=wandb.Settings(console="off", x_disable_stats=True),
    )
    for group, step_key in _STEP_OF_GROUP.items():
        run.define_metric(step_key)
        run.define_metric(f"{group}/*", step_metric=step_key)
    return run
