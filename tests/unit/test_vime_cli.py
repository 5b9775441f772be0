"""A knob file VIME would reject is one line from the real command line, before anything runs:
`python -m harness argv --backend vime --knobs <copy>` exits 2 with one `error:` line naming the
file, the key and the rule, and no traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT


@pytest.fixture
def knobs_copy(tmp_path: Path) -> Path:
    target = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


def harness_argv(knobs: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "argv",
            "--stage",
            "p1",
            "--rung",
            "fp8-plus-filters",
            "--mode",
            "colocate",
            "--backend",
            "vime",
            "--knobs",
            str(knobs),
            *extra,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"),
    [
        # a flag no VIME parser defines: dropped silently by VIME, refused here with the closest name
        (
            "base.yaml",
            "  rollout-top-p: 0.95\n",
            "  rollout-top-pp: 0.95\n",
            (
                "base.yaml: flags.rollout-top-pp: VIME (rl-align) has no flag --rollout-top-pp",
                "did you mean --rollout-top-p?",
                "[rule vime-flag-table; p1/fp8-plus-filters/colocate on vime]",
            ),
        ),
        # a value given to a switch
        (
            "base.yaml",
            "  sequence-parallel: true\n",
            "  sequence-parallel: 2\n",
            (
                "base.yaml: flags.sequence-parallel: --sequence-parallel is a switch (megatron parser) and takes no value, got 2",
                "[rule vime-flag-table;",
            ),
        ),
        # parallelism that does not divide the trainer's GPUs
        (
            "base.yaml",
            "  context-parallel-size: 2\n",
            "  context-parallel-size: 3\n",
            (
                "base.yaml: flags.tensor-model-parallel-size: Megatron needs TP x PP x CP to divide the trainer's GPUs",
                "4 x 1 x 3 = 12 does not divide 8",
                "[rule model-parallel-divides-world;",
            ),
        ),
        # experts that expert parallelism cannot split
        (
            "models/qwen3-30b-a3b.yaml",
            "num-experts: 128",
            "num-experts: 100",
            (
                "base.yaml: flags.expert-model-parallel-size: Megatron needs --num-experts (100) divisible by --expert-model-parallel-size (8)",
                "[rule experts-divisible-by-ep;",
            ),
        ),
    ],
)
def test_a_broken_knob_is_one_line_naming_file_key_and_rule(knobs_copy, file, old, new, expected):
    edit(knobs_copy / file, old, new)
    line = one_error_line(harness_argv(knobs_copy))
    for fragment in expected:
        assert fragment in line, line


def overriding_site(knobs: Path, *flags: str) -> str:
    """A site file that replaces rung-set flags on purpose (harness/spec/site.py rule 2)."""
    site = knobs.parent / "site.yaml"
    site.write_text(f"overrides-rungs: [{', '.join(flags)}]\n")
    return str(site)


def test_rl_align_top_p_without_top_k_is_refused_with_the_reason(knobs_copy):
    site = overriding_site(knobs_copy, "rollout-top-k")
    line = one_error_line(harness_argv(knobs_copy, "--site", site, "--set", "rollout-top-k=-1"))
    assert "vLLM top-p sampling replay requires --rollout-top-k > 0" in line, line
    assert "[rule top-p-replay-needs-top-k;" in line, line


def test_a_trainer_precision_vime_would_override_is_refused(knobs_copy):
    line = one_error_line(harness_argv(knobs_copy, "--site", overriding_site(knobs_copy, "bf16"), "--set", "bf16=null"))
    assert "VIME trains in bf16 whatever the flags" in line and "--bf16 (not set)" in line, line


def test_a_rung_vime_cannot_express_says_why_on_the_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "harness", "argv", "--stage", "p1", "--rung", "fp32-floor", "--backend", "vime"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_error_line(done)
    assert "knobs/ladder/fp32-floor.yaml: on-vime: not run on VIME (rl-align): VIME trains in bf16 whatever the flags" in line, line


def test_harness_run_refuses_the_same_knob_before_anything_is_launched(knobs_copy, tmp_path):
    edit(knobs_copy / "base.yaml", "  sequence-parallel: true\n", "  sequence-parallel: 2\n")
    runs = tmp_path / "runs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--stage",
            "p1",
            "--rung",
            "fp8-plus-filters",
            "--backend",
            "vime",
            "--knobs",
            str(knobs_copy),
            "--runs-dir",
            str(runs),
            "--vime-root",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_error_line(done)
    assert "flags.sequence-parallel: --sequence-parallel is a switch" in line, line
    assert not runs.exists(), "a run directory was created for a spec VIME would reject"


def test_argv_says_when_it_renders_a_rung_s_nearest_equivalent():
    done = subprocess.run(
        [sys.executable, "-m", "harness", "argv", "--stage", "p3", "--rung", "candidate-operator", "--backend", "vime"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("note: knobs/ladder/candidate-operator.yaml: on-vime: rendered as its nearest VIME equivalent"), done.stderr
