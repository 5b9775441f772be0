"""What every backend answers (harness.spec.backends): its traits, and the three things only it knows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.spec.errors import SpecError


@dataclass(frozen=True)
class Backend:
    name: str
    knob_section: Literal["embedded", "vime"]
    """Which per-backend section of the knob files applies (base.yaml's and a rung's `embedded:` or
    `vime:` flags, launch.yaml's budgets, models.yaml's model, the validation rules)."""
    replicate_section: Literal["embedded", "cluster"]
    """Which seeds-a-side count applies (stages.yaml and ab.yaml `replicates`)."""
    on_cluster: bool
    """Its runs are VIME's own on a cluster: the site file's stages, flags and candidate apply, and
    so do the rungs' `on-vime` caveats and VIME's own start-up rules."""
    launches: bool
    """It starts runs; False: it only reads runs that exist (--runs-dir)."""
    runs_of: str
    """Whose runs it judges: a rung file's `backends:` list names this (records judges VIME's runs)."""
    trainer_in_repo: bool
    """The trainer is this repository's code: its code version and the CPU's numerics name the run,
    its flags are checked before a launch, it can start warm, it counts its operator calls, the
    paired scorer can re-score its tokens, and it runs in no container."""
    long_runs: bool
    """Its runs take hours: a front end shows a progress line per run while it follows them."""

    def named_in(self, names) -> bool:
        """Whether a knob file's list of backends (a rung's `backends`, a model's `rendered-on`) takes
        this backend: by its own name, or by the name of the backend whose runs it judges."""
        return self.name in names or self.runs_of in names

    def trainer_command(self, vime_root: str | Path | None, on_cluster: bool = False) -> tuple[list[str], Path]:
        """The command prefix and working directory that start its trainer."""
        raise SpecError(f"backend {self.name!r} does not launch runs: --backend {self.name} only reads existing runs from --runs-dir")

    def output_flags(self, run_path: Path, spec_flags: dict) -> list[str]:
        """The flags that point the trainer's outputs (dumps, its own records) into the run directory."""
        return []

    def slots(self, parallel, cores: int = 1, memory_gib: float | None = None) -> tuple[int, str]:
        """(how many of its runs at once, why), from knobs/launch.yaml `parallel` (never None here) and
        this machine's usable cores and available memory."""
        return 1, f"{self.name} runs are read, not launched"


def debug_dump_flags(run_path: Path) -> list[str]:
    """VIME's debug-dump flags, which every trainer that speaks VIME's CLI takes."""
    dumps = run_path / "dumps"
    return [
        "--save-debug-rollout-data",
        str(dumps / "rollout_{rollout_id}.pt"),
        "--save-debug-train-data",
        str(dumps / "train_{rollout_id}_{rank}.pt"),
    ]
