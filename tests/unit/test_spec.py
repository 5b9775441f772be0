"""The experiment spec: the seed's config survives rendering, every rung resolves, bad input is named."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import SpecError, load_knobs, parse_argv, render_argv, resolve, validate
from harness.spec.cluster import skip_reason
from harness.spec.design_file import load_design

SEED_CONFIG = Path(__file__).parent.parent / "data" / "seed_suggested_config.txt"


@pytest.fixture(scope="module")
def knobs():
    return load_knobs(DEFAULT_KNOBS_DIR)


@pytest.fixture
def knobs_copy(tmp_path):
    target = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, target)
    return target


def seed_flags() -> dict:
    """The seed's "Suggested Baseline Config", colocate block included (its later value wins)."""
    return parse_argv(" ".join(SEED_CONFIG.read_text().split()).split(" "))


# Seed flags VIME knows under another name: the seed's spelling would be dropped without a word
# (knobs/base.yaml, `vime:` section, says where VIME defines the real one).
SEED_FLAGS_VIME_NAMES_OTHERWISE = {"vllm-router-policy": "router-policy"}


def test_recommended_baseline_renders_every_seed_flag_with_the_seed_value(knobs):
    spec = validate(resolve(knobs, "p1", "fp8-plus-filters", "colocate", "vime"), knobs)
    rendered = parse_argv(render_argv(spec.flags))
    expected = {SEED_FLAGS_VIME_NAMES_OTHERWISE.get(k, k): v for k, v in seed_flags().items()}
    missing = {k: v for k, v in expected.items() if rendered.get(k) != v}
    assert not missing, f"seed flags missing or changed in the rendered argv: {missing}"


def test_non_colocate_keeps_the_seed_memory_setting(knobs):
    spec = resolve(knobs, "p2", "fp8-plus-filters", "non-colocate", "vime")
    assert "colocate" not in spec.flags
    assert spec.flags["vllm-gpu-memory-utilization"] == 0.8


def test_every_rung_resolves_and_validates_at_every_stage_it_runs(knobs):
    resolved = 0
    for rung in knobs.rungs.values():
        for stage in rung.stages:
            for mode in knobs.stages[stage].modes:
                for backend in rung.backends:
                    if skip_reason(knobs, rung, backend):
                        continue  # says so instead (tests/unit/test_vime_matrix.py)
                    validate(resolve(knobs, stage, rung.id, mode, backend), knobs)
                    resolved += 1
    assert resolved >= 20


def test_rungs_change_only_what_they_declare(knobs):
    """A rung's resolved flags differ from its parent's exactly in the keys it lists."""
    for rung in knobs.rungs.values():
        if rung.parent is None:
            continue
        for backend in ("embedded", "vime"):
            if backend not in rung.backends or skip_reason(knobs, rung, backend) or skip_reason(knobs, knobs.rungs[rung.parent], backend):
                continue
            stage = rung.stages[0]
            mode = knobs.stages[stage].modes[0]
            child = resolve(knobs, stage, rung.id, mode, backend).flags
            parent = resolve(knobs, stage, rung.parent, mode, backend).flags if stage in knobs.rungs[rung.parent].stages else None
            if parent is None:
                continue
            changed = {k for k in child.keys() | parent.keys() if child.get(k) != parent.get(k)}
            declared = set()
            for section in rung.changes.for_backend(backend):
                declared |= set(section)
            assert changed <= declared, f"{rung.id} ({backend}) changes {changed - declared} without declaring it"
            if rung.id == "candidate-operator" and backend == "vime":
                continue  # on a cluster the candidate's flags come from --set (ladder/candidate-operator.yaml: why)
            assert changed, f"{rung.id} ({backend}) changes nothing against {rung.parent}"


def test_run_id_is_stable_and_spec_sensitive(knobs):
    a = resolve(knobs, "p1", "top-p", "colocate")
    b = resolve(knobs, "p1", "top-p", "colocate")
    c = resolve(knobs, "p1", "top-p", "colocate", overrides={"seed": 7})
    assert a.run_id == b.run_id
    assert a.run_id != c.run_id


def test_an_embedded_run_under_other_cpu_numerics_is_another_run(knobs, monkeypatch):
    """A finished run is reused by id: one made under an ISA switch (or on the other x86 kind) must
    not be found for this machine's own numerics, nor the other way round."""
    from harness.spec.machine import ISA_SETTINGS

    for name in ISA_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    native = resolve(knobs, "p1", "fp8-plus-filters", "colocate").run_id
    cluster = resolve(knobs, "p1", "fp8-plus-filters", "colocate", backend="vime").run_id
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert resolve(knobs, "p1", "fp8-plus-filters", "colocate").run_id != native
    assert resolve(knobs, "p1", "fp8-plus-filters", "colocate", backend="vime").run_id == cluster  # a cluster run is not this CPU's


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"tensor-model-parallel-size": 3}, "TP x PP x CP"),
        ({"expert-model-parallel-size": 3}, "--num-experts (128) divisible"),
        ({"global-batch-size": 100}, "must divide rollout-batch-size x n-samples-per-prompt (256)"),
        ({"rollout-num-gpus": 16}, "with --colocate VIME forces"),
        ({"rollout-num-gpus-per-engine": 3}, "multiple of --rollout-num-gpus-per-engine"),
        ({"max-tokens-per-gpu": None}, "requires --max-tokens-per-gpu"),
        ({"num-rollout": None}, "--num-rollout or --num-epoch"),
        ({"rollout-top-p": 1.5}, "--rollout-top-p must be in (0, 1]"),
    ],
)
def test_impossible_settings_are_explained_in_vime_terms(knobs, overrides, fragment):
    spec = resolve(knobs, "p1", "fp8-plus-filters", "colocate", "vime", overrides)
    with pytest.raises(SpecError) as err:
        validate(spec, knobs)
    assert any(fragment in line for line in err.value.problems), err.value.problems


def break_file(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("name", "old", "new", "fragment"),
    [
        ("ladder/top-p.yaml", "rollout-top-p: 0.95", "rollout-top-p: [0.95", "ladder/top-p.yaml: line"),
        ("ladder/top-p.yaml", "parent: near-aligned", "parent: near-alined", "ladder/top-p.yaml: parent: expected one of the rungs"),
        ("ladder/top-p.yaml", "why:", "wyh: x\nwhy:", "ladder/top-p.yaml: wyh: unknown key"),
        ("ladder/fp32-floor.yaml", "parent: null", "parent: fp8-plus-filters", "got a cycle"),
        ("stages.yaml", "nodes: 2", "nodes: two", "stages.yaml: stages.p1.nodes: expected a valid integer"),
        ("ladder/top-k.yaml", "class: semantic", "class: semantical", "ladder/top-k.yaml: expect.class: expected"),
        ("thresholds.yaml", 'reason: "Seed acceptance', 'raisin: "Seed acceptance', "thresholds.min_rollout_steps.raisin: unknown key"),
        ("ab.yaml", "candidate: candidate-operator", "candidate: candidate-operater", "ab.yaml: pair.candidate: expected one of the rungs"),
        ("ab.yaml", "stage: p3", "stage: p0", "ab.yaml: pair.stage: candidate-operator runs at p3, not 'p0'"),
        (
            "ladder/near-aligned.yaml",
            "max_rel_trend: near_aligned_max_rel_trend",
            "max_rel_trend: near_aligned_trend",
            "ladder/near-aligned.yaml: expect.max_rel_trend: expected a name from thresholds.yaml, got 'near_aligned_trend'",
        ),
        ("operator_thresholds.yaml", "value: 1.0e-4", "valeu: 1.0e-4", "operator_thresholds.yaml: thresholds.fused_max_abs_err.valeu: unknown key"),
    ],
)
def test_broken_knob_file_is_named_with_its_key(knobs_copy, name, old, new, fragment):
    break_file(knobs_copy, name, old, new)
    with pytest.raises(SpecError) as err:
        load_knobs(knobs_copy)
    assert any(fragment in line for line in err.value.problems), err.value.problems


def test_a_value_that_fits_no_member_of_a_union_is_one_problem(knobs_copy):
    # Threshold.value is `float | int`: pydantic reports the bad value once per member.
    break_file(knobs_copy, "thresholds.yaml", "value: 1.0e-4", "value: lots")
    with pytest.raises(SpecError) as err:
        load_knobs(knobs_copy)
    (problem,) = err.value.problems
    assert problem.endswith("thresholds.yaml: thresholds.rung_min_abs_delta.value: expected one of float or int, got 'lots' (type=str)"), problem


def test_cli_reports_a_broken_knob_file_in_one_line_without_traceback(knobs_copy):
    break_file(knobs_copy, "ladder/top-k.yaml", "rollout-top-k: 40", "rollout-top-k: {40")
    result = subprocess.run(
        [sys.executable, "-m", "harness", "argv", "--stage", "p1", "--rung", "top-k", "--knobs", str(knobs_copy)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "ladder/top-k.yaml" in result.stderr and "expected valid YAML" in result.stderr, result.stderr


def test_cli_argv_applies_set_overrides():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "argv",
            "--stage",
            "p1",
            "--rung",
            "near-aligned",
            "--json",
            "--set",
            "num-rollout=3",
            "--set",
            "balance-data=null",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    )
    flags = parse_argv(__import__("json").loads(result.stdout))
    assert flags["num-rollout"] == 3
    assert "balance-data" not in flags


def test_pytest_collects_the_p1_ladder_and_the_acceptance_criteria():
    def collect(*args):
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args], capture_output=True, text=True, cwd=REPO_ROOT
        )
        return [line for line in out.stdout.splitlines() if "::" in line]

    p1 = collect("-m", "p1", "--mode=colocate", "tests/ladder")
    assert len(p1) >= 5 and all("[p1-" in line for line in p1), p1
    acceptance = collect("-m", "acceptance", "tests/acceptance")
    assert any("completes-30-rollout-steps" in line for line in acceptance), acceptance


def test_a_sweep_offset_that_puts_a_judged_range_on_the_budgets_seeds_is_refused(knobs_copy):
    """The drift budget judges its own seeds, moved by each sweep offset as every judged seed is: an
    offset whose ladder seeds are the budget's (2026 + 3000 = 5026) would judge both on the same runs."""
    design = knobs_copy / "design.yaml"
    text = design.read_text()
    offsets = next(line for line in text.splitlines() if line.strip().startswith("sweep_offsets:"))
    design.write_text(text.replace(offsets, "  sweep_offsets: [3000]"))
    with pytest.raises(SpecError) as err:
        load_design(knobs_copy)  # what the main job, the sweep and the calibration load their seeds through
    message = str(err.value)
    assert "levers.yaml: budget.judging_seed" in message and "5026..5030" in message and "+3000" in message, message
