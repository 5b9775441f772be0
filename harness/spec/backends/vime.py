"""The vime backend: VIME's own train.py, from a VIME checkout, as a local process or a Ray job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.spec.backends.base import Backend, debug_dump_flags
from harness.spec.errors import SpecError
from harness.spec.flag_read import is_on


@dataclass(frozen=True)
class Vime(Backend):
    def trainer_command(self, vime_root, on_cluster: bool = False) -> tuple[list[str], Path]:
        """On a cluster (a Ray job) the VIME root is a path on the nodes: checked only if this machine sees it."""
        if not vime_root:
            raise SpecError("--backend vime needs --vime-root (or vime-root: in the site file): the VIME checkout that holds train.py")
        root = Path(vime_root).expanduser()
        if on_cluster and not root.exists():
            return ["python3", "train.py"], root
        root = root.resolve()
        if not (root / "train.py").is_file():
            raise SpecError(f"--vime-root {root}: expected a VIME checkout with train.py at its top, found none")
        return ["python3", "train.py"], root

    def output_flags(self, run_path: Path, spec_flags: dict) -> list[str]:
        """A run that logs to TensorBoard or W&B without saying where writes into its run directory
        too (the shared runs directory on a cluster), beside its dumps."""
        flags = debug_dump_flags(run_path)
        if is_on(spec_flags, "use-tensorboard") and "tensorboard-dir" not in spec_flags:
            flags += ["--tensorboard-dir", str(run_path / "tensorboard")]
        if is_on(spec_flags, "use-wandb") and "wandb-dir" not in spec_flags:
            flags += ["--wandb-dir", str(run_path)]
        return flags

    def slots(self, parallel, cores: int = 1, memory_gib: float | None = None) -> tuple[int, str]:
        return parallel.vime, f"launch.yaml parallel.vime = {parallel.vime}"


BACKEND = Vime(
    name="vime",
    knob_section="vime",
    replicate_section="cluster",
    on_cluster=True,
    launches=True,
    runs_of="vime",
    trainer_in_repo=False,
    long_runs=True,
)
