"""A GB200 site as a user writes it: placement and parallelism per stage, the P3 candidate on its
side only, the model it runs, the capacity check, and the VIME rules the RL-Kernel candidate and
vLLM's engine fields need, each problem one line naming the file, the key and the stage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import SpecError, load_knobs, resolve, validate
from harness.spec.capacity import parameters
from harness.spec.cluster import skip_reason
from harness.spec.models import load_model
from harness.spec.render import parse_argv, render_argv
from harness.spec.site import launch_problems, load_site, with_settings

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
SITE = REPO_ROOT / "knobs" / "sites" / "gb200-4x4.yaml"


def _site(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(SITE.read_text())
    data.pop("candidate", None)
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _problems(knobs, stage, rung, mode="colocate", **overrides) -> list[str]:
    try:
        validate(resolve(knobs, stage, rung, mode, "vime", overrides or None), knobs)
    except SpecError as err:
        return err.problems
    return []


@pytest.mark.parametrize(("model", "billions"), [("qwen3-30b-a3b", 30.5), ("qwen3-235b-a22b", 235.1), ("deepseek-v3", 671.0), ("qwen3-8b", 8.19)])
def test_parameter_counts_from_the_megatron_flags_match_the_published_sizes(model, billions):
    assert parameters(load_model(DEFAULT_KNOBS_DIR, model).flags) / 1e9 == pytest.approx(billions, rel=0.005)


def test_every_stage_renders_on_the_gb200_site():
    knobs = with_settings(KNOBS, load_site(SITE))
    for stage, config in knobs.stages.items():
        for mode in config.modes:
            for rung in (r for r in knobs.rungs.values() if stage in r.stages and not skip_reason(knobs, r, "vime")):
                assert not _problems(knobs, stage, rung.id, mode), (stage, rung.id, mode)


def test_a_model_too_large_for_the_stage_is_one_line_naming_stage_and_key(tmp_path):
    knobs = with_settings(KNOBS, load_site(_site(tmp_path, model="qwen3-235b-a22b")))
    problems = [p for p in _problems(knobs, "p1", "fp8-plus-filters") if "model-fits-the-stage" in p]
    training = next(p for p in problems if "training holds" in p)
    assert training.startswith(
        f"{tmp_path / 'site.yaml'}: stages.p1.actor-nodes: stage p1 on GB200 cannot hold the model: the model has 235.1B parameters"
    ), training
    assert "trainer's 8 GPUs x 173 GiB" in training
    rollout = next(p for p in problems if "each vLLM engine" in p)
    assert "rollout-num-gpus-per-engine" in rollout
    # The seed's model fits its stages.
    assert not [p for p in _problems(with_settings(KNOBS, load_site(SITE)), "p0", "fp8-plus-filters") if "model-fits" in p]


def test_a_site_chooses_the_model_and_the_checkpoint_placeholders_become_that_models(tmp_path):
    knobs = with_settings(KNOBS, load_site(_site(tmp_path, model="qwen3-8b")))
    spec = resolve(knobs, "p1", "near-aligned", "colocate", "vime")
    assert spec.flags["num-layers"] == 36 and "num-experts" not in spec.flags
    # The site's paths name Qwen3-30B-A3B's checkpoints: never given to Qwen3-8B without a word.
    assert spec.flags["hf-checkpoint"] == "/path/to/qwen3-8b" and spec.flags["ref-load"] == "/path/to/qwen3-8b_torch_dist"
    assert any("/path/to/qwen3-8b" in problem for problem in launch_problems(spec, "site.yaml"))
    bad = _site(tmp_path, model="no-such-model")
    with pytest.raises(SpecError) as err:
        with_settings(KNOBS, load_site(bad))
    assert err.value.problems[0].startswith(f"{bad}: model: expected a model file")


def test_a_stage_that_cannot_render_never_stops_collecting_the_others(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("stages:\n  p0: {gpus-per-node: 4, actor-nodes: 1, rollout-gpus: 4}\n  p1: {gpus-per-node: 4, actor-nodes: 2}\n")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "tests/ladder",
        "--backend",
        "vime",
        "--site",
        str(site),
    ]
    p1 = subprocess.run([*command, "-m", "p1"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert p1.returncode == 0 and "test_rung_against_parent[p1-" in p1.stdout, p1.stdout[-2000:] + p1.stderr[-2000:]
    p0 = subprocess.run([*command, "-m", "p0"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    output = p0.stdout + p0.stderr
    assert p0.returncode != 0 and "Traceback" not in output, output[-2000:]
    assert "4 x 1 x 2 = 8 does not divide 4 [rule model-parallel-divides-world; p0/" in output, output[-2000:]


def test_the_rl_kernel_candidate_is_checked_as_vime_runs_it():
    knobs = with_settings(KNOBS, load_site(SITE))
    alone = _problems(knobs, "p3", "fp8-plus-filters", **{"enable-rl-kernel": True})
    assert any("--enable-rl-kernel without --rl-kernel-ops" in p and "default=()" in p for p in alone), alone
    unswitched = _problems(knobs, "p3", "fp8-plus-filters", **{"rl-kernel-ops": "linear_logp"})
    assert any("without --enable-rl-kernel" in p and "is_rl_kernel_op_enabled" in p for p in unswitched), unswitched
    # P1 keeps the seed's CP 2, where RL-Kernel's linear_logp would fall back.
    under_cp = _problems(knobs, "p1", "fp8-plus-filters", **{"enable-rl-kernel": True, "rl-kernel-ops": "linear_logp"})
    assert any("context-parallel-size" in p and "_linear_logp_runtime_blocker" in p for p in under_cp), under_cp


def test_a_vllm_field_vime_sets_itself_is_refused_with_another_value():
    problems = _problems(KNOBS, "p1", "fp8-plus-filters", **{"vllm-logprobs-mode": "raw_logprobs"})
    (line,) = [p for p in problems if "vllm-fields-vime-sets" in p]
    assert "logprobs_mode='processed_logprobs'" in line and "vllm_engine.py@6c03169 _compute_server_args" in line


def test_list_flags_render_as_nargs_and_a_list_for_a_one_value_flag_is_refused(tmp_path):
    knobs = with_settings(
        KNOBS, load_site(_site(tmp_path, flags={"vllm-cudagraph-capture-sizes": [1, 2, 4], "eval-prompt-data": ["aime", "/data/aime.jsonl"]}))
    )
    spec = validate(resolve(knobs, "p1", "fp8-plus-filters", "colocate", "vime"), knobs)
    argv = render_argv(spec.flags)
    at = argv.index("--vllm-cudagraph-capture-sizes")
    assert argv[at : at + 4] == ["--vllm-cudagraph-capture-sizes", "1", "2", "4"]
    assert parse_argv(argv)["eval-prompt-data"] == ["aime", "/data/aime.jsonl"]
    bad = with_settings(KNOBS, load_site(_site(tmp_path, flags={"rm-type": ["deepscaler", "math"]})))
    assert any("--rm-type takes one value (vime parser), got a list of 2" in p for p in _problems(bad, "p1", "fp8-plus-filters"))


def test_tracking_settings_do_not_change_the_run_id(tmp_path):
    plain = with_settings(KNOBS, load_site(_site(tmp_path)))
    tracked = with_settings(KNOBS, load_site(_site(tmp_path, wandb={"project": "renamed", "mode": "offline"}, flags={"use-tensorboard": True})))
    a, b = resolve(plain, "p1", "fp8-plus-filters", "colocate", "vime"), resolve(tracked, "p1", "fp8-plus-filters", "colocate", "vime")
    assert b.flags["use-wandb"] is True and "use-wandb" not in a.flags
    assert a.run_id == b.run_id
    assert resolve(plain, "p1", "fp8-plus-filters", "colocate", "vime", {"seed": 7}).run_id != a.run_id
