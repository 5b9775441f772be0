"""Which program a backend runs, and the flags that point its outputs into the run directory.

The embedded trainer and real VIME's train.py take the same argv (VIME's flags); the launcher
only adds where dumps go, so one rendered spec serves both.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import REPO_ROOT
from harness.spec import SpecError
from harness.spec.flag_read import is_on


def trainer_command(backend: str, vime_root: str | Path | None, on_cluster: bool = False) -> tuple[list[str], Path]:
    """The command prefix and working directory that start the trainer for `backend`. On a cluster
    (a Ray job) the VIME root is a path on the nodes: it is checked here only if this machine sees it."""
    if backend == "embedded":
        return [sys.executable, "-m", "harness.embedded.train"], REPO_ROOT
    if backend == "vime":
        if not vime_root:
            raise SpecError("--backend vime needs --vime-root (or vime-root: in the site file): the VIME checkout that holds train.py")
        root = Path(vime_root).expanduser()
        if on_cluster and not root.exists():
            return ["python3", "train.py"], root
        root = root.resolve()
        if not (root / "train.py").is_file():
            raise SpecError(f"--vime-root {root}: expected a VIME checkout with train.py at its top, found none")
        return ["python3", "train.py"], root
    raise SpecError(f"backend {backend!r} does not launch runs: --backend records only reads existing runs from --runs-dir")


def output_flags(run_path: Path, backend: str, spec_flags: dict | None = None) -> list[str]:
    """VIME's debug-dump flags (both backends), and for the miniature where to put its record. On
    VIME, a run that logs to TensorBoard or W&B without saying where writes into its run directory
    too (the shared runs directory on a cluster), beside its dumps."""
    dumps = run_path / "dumps"
    flags = [
        "--save-debug-rollout-data",
        str(dumps / "rollout_{rollout_id}.pt"),
        "--save-debug-train-data",
        str(dumps / "train_{rollout_id}_{rank}.pt"),
    ]
    if backend == "embedded":
        flags += ["--embedded-output-dir", str(run_path)]  # its TensorBoard and W&B default to this directory
        return flags
    spec_flags = spec_flags or {}
    if is_on(spec_flags, "use-tensorboard") and "tensorboard-dir" not in spec_flags:
        flags += ["--tensorboard-dir", str(run_path / "tensorboard")]
    if is_on(spec_flags, "use-wandb") and "wandb-dir" not in spec_flags:
        flags += ["--wandb-dir", str(run_path)]
    return flags
