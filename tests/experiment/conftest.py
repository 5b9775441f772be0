"""Recorded runs for the command-line front ends, copied where judging may write.

tests/data/recorded_runs holds two run directories the main job recorded at seed offset +100 (the
fp32 floor and the near-aligned rung, first seed; their token dumps left out, so the probes that
read dumps say "not checked"). With knobs/ judging one seed a side (the P1 stage's replicates knob),
the recorded first seeds are the whole sample of those two rungs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded_runs"
SEED_OFFSET = "100"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    """(runs directory, knobs directory) in a fresh temporary folder."""
    root = tmp_path_factory.mktemp("recorded")
    shutil.copytree(RECORDED, root / "runs")
    shutil.copytree(DEFAULT_KNOBS_DIR, root / "knobs")
    stages = root / "knobs" / "stages.yaml"
    text = stages.read_text()
    assert text.count("replicates:\n      embedded: 5") == 2, "the P1 and P3 stages' replicates knobs moved: update this fixture"
    stages.write_text(text.replace("replicates:\n      embedded: 5", "replicates:\n      embedded: 1"))
    return root / "runs", root / "knobs"
