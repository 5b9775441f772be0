"""The design tools' one writer of a knobs file's measured block (harness.spec.measured_block): the
hand-written head above the marker stays byte for byte, and a file without the marker is refused."""

from __future__ import annotations

import shutil

import pytest
import yaml

from harness import DEFAULT_KNOBS_DIR
from harness.spec import SpecError, load_knobs
from harness.spec.measured_block import write_below_marker

LEVERS_MARKER = "# --- measured by tools/budget_design.py: do not edit by hand below this line ---"


def test_the_head_stays_and_the_block_is_replaced(tmp_path):
    knobs = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, knobs)
    path = knobs / "levers.yaml"
    head = path.read_text().split(LEVERS_MARKER)[0]
    measured = {"date": "2026-12-07", "seeds": [1, 2], "rungs": {}}
    write_below_marker(path, LEVERS_MARKER, {"measured": measured})
    text = path.read_text()
    assert text.startswith(head + LEVERS_MARKER + "\n") and text.count(LEVERS_MARKER) == 1
    assert yaml.safe_load(text)["measured"] == measured
    assert load_knobs(knobs).levers.measured == measured  # the file still loads as the spec


def test_a_file_without_the_marker_is_refused_and_kept(tmp_path):
    path = tmp_path / "hand-written.yaml"
    path.write_text("budget: {}\n")
    with pytest.raises(SpecError, match=r"hand-written.yaml: expected the marker line"):
        write_below_marker(path, LEVERS_MARKER, {"measured": {}})
    assert path.read_text() == "budget: {}\n"
