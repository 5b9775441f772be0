"""The site file and session --set layered over knobs/ (harness/spec/site.py): each rung keeps its
own checkpoint, a rung-set flag is never replaced silently, a placeholder never reaches a VIME
launch, and the embedded backend is untouched by a site's cluster paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import SpecError, load_knobs, resolve, validate
from harness.spec.budget import run_timeout
from harness.spec.site import launch_problems, load_site, with_settings

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
EXAMPLE = REPO_ROOT / "knobs" / "sites" / "example.yaml"
PATHS = """paths:
  /path/to/Qwen3-30B-A3B-FP8: /lustre/ckpt/Qwen3-30B-A3B-FP8
  /path/to/Qwen3-30B-A3B: /lustre/ckpt/Qwen3-30B-A3B
  /path/to/Qwen3-30B-A3B_torch_dist: /lustre/ckpt/Qwen3-30B-A3B_torch_dist
  /path/to/dapo-math-17k: /lustre/data/dapo-math-17k
"""


def site(tmp_path: Path, text: str):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return load_site(path)


def test_each_rung_keeps_its_own_checkpoint(tmp_path):
    knobs = with_settings(KNOBS, site(tmp_path, PATHS))
    near = resolve(knobs, "p1", "near-aligned", "colocate", "vime")
    fp8 = resolve(knobs, "p1", "fp8-rollout", "colocate", "vime")
    assert near.flags["hf-checkpoint"] == "/lustre/ckpt/Qwen3-30B-A3B"  # BF16 rollout stays BF16
    assert fp8.flags["hf-checkpoint"] == "/lustre/ckpt/Qwen3-30B-A3B-FP8"
    assert "rung:fp8-rollout" in fp8.provenance["hf-checkpoint"] and "paths" in fp8.provenance["hf-checkpoint"]
    assert launch_problems(near, "site.yaml") == [] == launch_problems(fp8, "site.yaml")


def test_a_session_wide_checkpoint_is_refused_naming_the_rung():
    knobs = with_settings(KNOBS, None, {"hf-checkpoint": "/lustre/ckpt/Qwen3-30B-A3B-FP8"})
    with pytest.raises(SpecError) as err:
        resolve(knobs, "p1", "near-aligned", "colocate", "vime")
    (line,) = err.value.problems
    assert line.startswith("--set hf-checkpoint=/lustre/ckpt/Qwen3-30B-A3B-FP8: rung fp32-floor sets hf-checkpoint")
    assert "inherited by near-aligned" in line and "paths:" in line and "overrides-rungs:" in line


def test_a_site_that_says_so_may_replace_a_rung_flag(tmp_path):
    knobs = with_settings(KNOBS, site(tmp_path, "overrides-rungs: [rollout-top-p]\n"), {"rollout-top-p": 0.9})
    spec = resolve(knobs, "p1", "top-p", "colocate", "embedded")
    assert spec.flags["rollout-top-p"] == 0.9 and spec.provenance["rollout-top-p"] == "--set"
    assert spec.overrides == {"rollout-top-p": 0.9}  # recorded with the run


def test_site_flags_over_a_rung_flag_name_the_site_file(tmp_path):
    knobs = with_settings(KNOBS, site(tmp_path, "flags:\n  rollout-temperature: 0.9\n"))
    with pytest.raises(SpecError) as err:
        resolve(knobs, "p1", "temperature", "colocate", "vime")
    assert "site.yaml flags: rollout-temperature: rung temperature sets rollout-temperature" in err.value.problems[0]
    assert resolve(knobs, "p1", "temperature", "colocate", "embedded").flags["rollout-temperature"] != 0.9  # cluster flags only


def test_placeholders_are_one_line_each_on_vime_only():
    vime = resolve(KNOBS, "p1", "near-aligned", "colocate", "vime")
    lines = launch_problems(vime, None)
    assert {line.split(" ")[0] for line in lines} == {"--hf-checkpoint", "--ref-load", "--prompt-data"}
    assert all("knobs/sites/example.yaml" in line and "paths:" in line for line in lines)
    assert "knobs/ladder/fp32-floor.yaml" in next(line for line in lines if line.startswith("--hf-checkpoint"))
    assert launch_problems(resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded"), None) == []


def test_the_embedded_backend_is_unchanged_by_a_site_s_cluster_paths_and_shapes(tmp_path):
    text = PATHS + "stages:\n  p1:\n    gpus-per-node: 4\n    actor-nodes: 2\nray-address: http://head:8265\n"
    plain = resolve(KNOBS, "p1", "near-aligned", "colocate", "embedded")
    with_site = resolve(with_settings(KNOBS, site(tmp_path, text)), "p1", "near-aligned", "colocate", "embedded")
    assert with_site.run_id == plain.run_id


def test_the_site_s_wandb_reaches_the_embedded_trainer_too(tmp_path):
    """The embedded trainer logs through VIME's W&B flags, so a site's W&B project applies to it."""
    from harness.embedded import flags as embedded_flags
    from harness.spec import render_argv

    knobs = with_settings(KNOBS, site(tmp_path, "wandb:\n  project: lab\n  mode: offline\n"))
    spec = resolve(knobs, "p1", "near-aligned", "colocate", "embedded")
    assert spec.flags["use-wandb"] is True and spec.flags["wandb-mode"] == "offline"
    embedded_flags.parse(render_argv(spec.flags))  # the embedded trainer's own flag table takes them


def test_stage_shape_and_wandb_render_on_vime(tmp_path):
    text = PATHS + "stages:\n  p1:\n    gpus-per-node: 8\n    actor-nodes: 1\nwandb:\n  project: lab\n  entity: team\n  mode: offline\n"
    loaded = site(tmp_path, text)
    flags = resolve(with_settings(KNOBS, loaded), "p1", "near-aligned", "colocate", "vime").flags
    assert (flags["num-gpus-per-node"], flags["actor-num-gpus-per-node"], flags["actor-num-nodes"]) == (8, 8, 1)
    assert flags["use-wandb"] is True and flags["wandb-project"] == "lab" and flags["wandb-mode"] == "offline"
    env = loaded.job_env({"WANDB_API_KEY": "k", "HOME": "/root"})
    assert env == {"WANDB_PROJECT": "lab", "WANDB_MODE": "offline", "WANDB_ENTITY": "team"}


def test_environment_patterns_forward_only_what_they_name(tmp_path):
    loaded = site(tmp_path, "env:\n  forward: [WANDB_*, HF_*]\n  set:\n    NCCL_DEBUG: WARN\n")
    env = loaded.job_env({"WANDB_API_KEY": "k", "HF_HOME": "/hf", "PYTHONPATH": "/laptop", "HOME": "/root"})
    assert env == {"WANDB_API_KEY": "k", "HF_HOME": "/hf", "NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ray-adress: x\n", "ray-adress: unknown site key; allowed here: paths, vime-root, ray-address, working-dir, runs-dir"),
        ("wandb:\n  project: x\n  projekt: y\n", "wandb.projekt: unknown site key; allowed here: project, entity, group, mode"),
        ("env:\n  forwad: [X]\n", "env.forwad: unknown site key; allowed here: forward, set"),
        ("stages:\n  p1:\n    gpus-per-node: 0\n", "stages.p1.gpus-per-node: expected greater than or equal to 1"),
        ("- a\n- b\n", "expected a mapping of site keys"),
    ],
)
def test_a_bad_site_file_is_one_line_naming_file_and_key(tmp_path, text, fragment):
    with pytest.raises(SpecError) as err:
        site(tmp_path, text)
    (line,) = err.value.problems
    assert "site.yaml" in line and fragment in line, line


def test_the_example_site_file_loads_and_fills_every_placeholder():
    example = load_site(EXAMPLE)
    knobs = with_settings(KNOBS, example)
    for rung in ("near-aligned", "fp8-rollout", "fp8-plus-filters", "temperature"):
        spec = validate(resolve(knobs, "p1", rung, "colocate", "vime"), knobs)  # VIME's own checks pass with its shape
        assert launch_problems(spec, example.source) == [], rung


def test_the_run_budget_comes_from_the_stage():
    vime = resolve(KNOBS, "p1", "near-aligned", "colocate", "vime")
    seconds, why = run_timeout(KNOBS, vime)
    budget = KNOBS.budgets.stages["p1"].vime
    assert seconds == budget.start_up_s + 100 * budget.step_s and "100 rollouts" in why
    embedded = resolve(KNOBS, "p0", "fp8-plus-filters", "colocate", "embedded")
    assert run_timeout(KNOBS, embedded)[0] >= 3600  # no tighter than the fixed limit embedded runs were measured under


def test_pytest_takes_site_and_set_and_refuses_a_rung_flag(tmp_path):
    """The pytest options: a bad site file stops the session with its line; a --set of a rung's flag
    fails collection with the rung named (collection only: nothing runs)."""
    bad = tmp_path / "site.yaml"
    bad.write_text("ray-adress: x\n")
    pytest_cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "tests/ladder/test_ladder.py"]
    done = subprocess.run([*pytest_cmd, "--site", str(bad)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "ray-adress: unknown site key" in done.stdout + done.stderr
    done = subprocess.run([*pytest_cmd, "--set", "rollout-top-p=0.9"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "--set rollout-top-p=0.9: rung " in output and "sets rollout-top-p" in output, output[-2000:]
    assert "Traceback" not in output
