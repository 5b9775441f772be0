"""knobs/calibration.yaml, typed: the seeds and runs that calibrate the boundary envelopes
(docs/calibration.md), the interval each boundary's ratio gets, and (below its marker line,
written by tools/calibrate_envelopes.py) what was measured.

The calibration seeds must share no seed with any range of knobs/design.yaml: the runs that set
the envelope multiple k must not be runs it then classifies. `load_calibration` holds that and
says the overlap in one line (file, key, the range it collides with)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.spec.design_file import DESIGN_FILE, Design, budget_seed_ranges, load_design, overlap
from harness.spec.errors import KnobError
from harness.spec.levers import LeverFile
from harness.spec.load import parse_file
from harness.spec.schema import Strict

CALIBRATION_FILE = "calibration.yaml"
MARKER = "# --- measured by tools/calibrate_envelopes.py: do not edit by hand below this line ---"


class CalibrationSeeds(Strict):
    first: int
    count: int = Field(ge=1)
    reason: str = Field(min_length=10)

    @property
    def seeds(self) -> list[int]:
        return list(range(self.first, self.first + self.count))


class CalibrationRuns(Strict):
    stage: str
    mode: str
    num_rollout: int = Field(ge=3)  # the first capture is at rollout 2
    min_tokens: int = Field(ge=1)
    aligned: list[str] = Field(min_length=1)
    control_base: str
    controls: dict[str, str] = Field(min_length=1)  # fault -> the boundary it is planted at
    reason: str = Field(min_length=10)


class OwnControl(Strict):
    at: str  # the boundary the fault is planted at
    side: Literal["trainer", "rollout"]  # the engine it is planted in


class OwnCheck(Strict):
    """The own-input check's calibration (docs/calibration.md): the side each control of ``runs`` is
    planted in, and controls at the size of interest on a rung at its own precision."""

    sides: dict[str, Literal["trainer", "rollout"]] = Field(min_length=1)  # runs.controls fault -> its engine
    control_base: str
    controls: dict[str, OwnControl] = Field(min_length=1)
    reason: str = Field(min_length=10)


class Interval(Strict):
    confidence: float = Field(gt=0.5, lt=1.0)
    resamples: int = Field(ge=100)
    reason: str = Field(min_length=10)


class Calibration(Strict):
    seeds: CalibrationSeeds
    runs: CalibrationRuns
    interval: Interval
    own: OwnCheck | None = None
    measured: dict = Field(default_factory=dict)


def check_seeds_apart(calibration: Calibration, design: Design, file: str) -> None:
    """Raise KnobError naming the file and key when a calibration seed is in any design range."""
    mine = {"calibration seeds": range(calibration.seeds.first, calibration.seeds.first + calibration.seeds.count)}
    ranges = {f"{DESIGN_FILE} {key}": other for key, other in design.seed_ranges().items()}
    levers_path = Path(file).parent / "levers.yaml"
    if levers_path.exists():
        ranges.update(budget_seed_ranges(design, parse_file(levers_path, LeverFile)))
    clash = overlap(mine, ranges)
    if clash:
        _, seeds, key, other = clash
        raise KnobError(
            file,
            "seeds.first",
            f"calibration seeds that no judged, design or sweep run uses; {seeds.start}..{seeds.stop - 1} "
            f"share seeds with {key} ({other.start}..{other.stop - 1})",
            has_got=False,
        )


def _shown(path: Path) -> str:
    """The path as parse_file names files: relative to the working directory where it can be."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_calibration(knobs_dir: Path) -> Calibration:
    path = Path(knobs_dir) / CALIBRATION_FILE
    calibration = parse_file(path, Calibration)
    check_seeds_apart(calibration, load_design(knobs_dir), _shown(path))
    return calibration
