"""The embedded backend: the miniature VIME of this repository (harness.embedded), on this machine."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness import REPO_ROOT
from harness.spec.backends.base import Backend, debug_dump_flags


@dataclass(frozen=True)
class Embedded(Backend):
    def trainer_command(self, vime_root, on_cluster: bool = False) -> tuple[list[str], Path]:
        return [sys.executable, "-m", "harness.embedded.train"], REPO_ROOT

    def output_flags(self, run_path: Path, spec_flags: dict) -> list[str]:
        # Its own record, TensorBoard and W&B default to the run directory.
        return debug_dump_flags(run_path) + ["--embedded-output-dir", str(run_path)]

    def slots(self, parallel, cores: int = 1, memory_gib: float | None = None) -> tuple[int, str]:
        if parallel.embedded != "auto":
            return parallel.embedded, f"launch.yaml parallel.embedded = {parallel.embedded}"
        by_memory = cores if memory_gib is None else max(1, int(memory_gib // parallel.memory_per_run_gib))
        memory_note = "" if memory_gib is None else f", {memory_gib:.0f} GiB available / {parallel.memory_per_run_gib:g} GiB a run"
        return max(1, min(cores, by_memory)), f"launch.yaml parallel.embedded = auto: {cores} usable cores{memory_note}"


BACKEND = Embedded(
    name="embedded",
    knob_section="embedded",
    replicate_section="embedded",
    on_cluster=False,
    launches=True,
    runs_of="embedded",
    trainer_in_repo=True,
    long_runs=False,
)
