"""knobs/candidate.yaml and knobs/readiness.yaml: a bad key or a broken link is one line naming the file
and the key (harness.spec.candidate_file, readiness_file, candidate_load)."""

from __future__ import annotations

import shutil

import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.spec import SpecError, load_knobs


def _knobs_with(tmp_path, file: str, old: str, new: str):
    target = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, target)
    path = target / file
    text = path.read_text()
    assert old in text, f"{file} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as err:
        load_knobs(target)
    return "\n".join(err.value.problems)


@pytest.mark.parametrize(
    "file, old, new, words",
    [
        ("candidate.yaml", "boundary: fp8-weights", "boundary: fp8-weightz", "candidate.yaml: boundary: expected an operator lever"),
        (
            "candidate.yaml",
            "flag: embedded-linear-operator",
            "flag: embedded-linear-operatorx",
            "candidate.yaml: flag: expected one of ab.yaml operator_path_flags",
        ),
        (
            "candidate.yaml",
            "    rung: fp8-rollout\n    stage: p1",
            "    rung: fp8-rollout\n    stage: p3",
            "pairs.fp8-rollout: expected a rung of ladder/ that runs at p3",
        ),
        ("candidate.yaml", "  bf16: near-aligned", "  bf16: nowhere", "mixed_paths.bf16: expected one of pairs"),
        (
            "candidate.yaml",
            "    embedded-inject: rollout-fp8-weight-bits:1",
            "    rollout-top-p: 0.5",
            "negative_control.set.rollout-top-p: expected a flag of ab.yaml planted_fault_flags",
        ),
        ("readiness.yaml", "stage: p1", "stage: p9", "readiness.yaml: stage: expected a stage of stages.yaml"),
        ("readiness.yaml", "    flags: [rollout-top-k]", "    flags: [rollout-top-p]", "is already knob 'top-p'"),
    ],
)
def test_a_broken_candidate_or_readiness_file_is_one_line(tmp_path, file, old, new, words):
    assert words in _knobs_with(tmp_path, file, old, new)
