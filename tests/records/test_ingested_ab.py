"""A real A/B on a GB200 cluster, end to end, without the cluster: the P3 pair rendered for a site of
4 nodes x 4 GPUs from the refreshed flag table with RL-Kernel's linear_logp as the candidate, both
argvs checked as VIME would check them; two runs of the stand-in trainer (tests/launch/
vime_like_train.py: VIME's argument print, perf lines, Memory-Usage prints, vLLM's KV-cache lines
and RL-Kernel's op line and counters) given those argvs; their logs ingested and judged as one A/B
with `python -m harness judge --baseline --candidate`: the contract on what the runs printed, the
candidate's execution from its own log, the seed's questions, the performance half and the seed's
summary table with both rows. A candidate whose operator fell back fails the gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.records.rundir import RunDir
from harness.spec import load_knobs, resolve, validate
from harness.spec.render import render_argv
from harness.spec.site import load_site, with_settings
from harness.spec.vime_flags import load_flag_table

STAND_IN = REPO_ROOT / "tests" / "launch" / "vime_like_train.py"
SITE = REPO_ROOT / "knobs" / "sites" / "gb200-4x4.yaml"
ROLLOUTS = 30  # the seed's "at least 30 rollout steps"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The GB200 example site with its checkpoint and data paths pointing at files that exist here
    (the A/B compares the prompt files by content)."""
    root = tmp_path_factory.mktemp("gb200")
    (root / "data").mkdir()
    prompts = root / "data" / "dapo-math-17k.jsonl"
    prompts.write_text('{"prompt": [{"role": "user", "content": "1+1? Answer: \\\\boxed{$Answer}"}], "label": "2"}\n')
    # The FP8 rollout checkpoint, under a name that does not say FP8: its config.json does.
    weights = root / "rollout-weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}')
    text = SITE.read_text().replace("/lustre/data/dapo-math-17k/dapo-math-17k.jsonl", str(prompts))
    text = text.replace("/lustre/models/Qwen3-30B-A3B-FP8", str(weights))
    (root / "site.yaml").write_text(text)
    (root / "candidates").mkdir()
    (root / "candidates" / "rl-kernel-linear-logp.yaml").write_text((SITE.parent / "candidates" / "rl-kernel-linear-logp.yaml").read_text())
    knobs = with_settings(load_knobs(DEFAULT_KNOBS_DIR), load_site(root / "site.yaml"))
    return root, knobs


def _pair(knobs, mode="colocate"):
    overrides = {"num-rollout": ROLLOUTS}
    baseline = validate(resolve(knobs, "p3", knobs.ab.pair.baseline, mode, "vime", overrides), knobs)
    candidate = validate(resolve(knobs, "p3", knobs.ab.pair.candidate, mode, "vime", overrides), knobs)
    return baseline, candidate


def test_the_p3_pair_renders_for_gb200_from_the_refreshed_table_with_the_candidate_on_one_side(cluster):
    _, knobs = cluster
    table = load_flag_table(knobs.root, knobs.base.vime_line)
    assert table.vime_commit.startswith("e972c37") and table.sources["vime"].commit == table.vime_commit
    for flag in (
        "enable-rl-kernel",
        "rl-kernel-ops",
        "rl-kernel-strict",
        "rlk-consistency-mode",
        "vllm-enable-deterministic-inference",
        "use-gated-attention",
    ):
        assert flag in table.flags, flag
    for mode in ("colocate", "non-colocate"):
        baseline, candidate = _pair(knobs, mode)
        differing = {k for k in baseline.flags.keys() | candidate.flags.keys() if baseline.flags.get(k) != candidate.flags.get(k)}
        assert differing == {"enable-rl-kernel", "rl-kernel-ops"}, differing
        assert candidate.flags["rl-kernel-ops"] == "linear_logp" and candidate.flags["context-parallel-size"] == 1
        assert candidate.flags["actor-num-nodes"] * candidate.flags["actor-num-gpus-per-node"] == 8
    # P0 on one GB200 node: 4 GPUs, the seed's TP 4 with CP 1 and experts over the node.
    p0 = validate(resolve(knobs, "p0", "fp8-plus-filters", "colocate", "vime"), knobs)
    assert (p0.flags["actor-num-nodes"], p0.flags["num-gpus-per-node"], p0.flags["context-parallel-size"]) == (1, 4, 1)


def _run_stand_in(argv: list[str], log: Path, env_extra: dict | None = None) -> None:
    env = {**os.environ, "STANDIN_STEP_S": "0", **(env_extra or {})}
    with log.open("w") as out:
        subprocess.run([sys.executable, str(STAND_IN), *argv], stdout=out, stderr=subprocess.STDOUT, env=env, check=True, timeout=300)


def _harness(*args: str, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_two_vime_logs_are_ingested_and_judged_as_one_ab_with_its_performance_half(cluster, tmp_path):
    root, knobs = cluster
    baseline, candidate = _pair(knobs)
    _run_stand_in(render_argv(baseline.flags), tmp_path / "baseline.log")
    _run_stand_in(render_argv(candidate.flags), tmp_path / "candidate.log")

    # Ingest keeps what each run printed as its flags, under an id from those flags.
    runs = tmp_path / "runs"
    ingested = {}
    for side in ("baseline", "candidate"):
        done = _harness("ingest", str(tmp_path / f"{side}.log"), "--runs-dir", str(runs))
        assert done.returncode == 0, done.stderr
        ingested[side] = RunDir(Path(done.stdout.strip().splitlines()[-1])).load()
    b, c = ingested["baseline"], ingested["candidate"]
    assert b.status.state == c.status.state == "finished"
    assert b.spec.flags["bf16"] is True and b.spec.flags["num-rollout"] == ROLLOUTS and "enable-rl-kernel" not in b.spec.flags
    assert c.spec.flags["enable-rl-kernel"] is True and c.spec.flags["rl-kernel-ops"] == ["linear_logp"] and c.spec.flags["rlk-fast"] == "auto"
    assert b.id != c.id and b.id.startswith("ingested-")

    out = tmp_path / "judged"
    done = _harness(
        "judge",
        "--baseline",
        str(tmp_path / "baseline.log"),
        "--candidate",
        str(tmp_path / "candidate.log"),
        "--runs-dir",
        str(runs),
        "--out",
        str(out),
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "CONTRACT" not in done.stdout, done.stdout
    assert "candidate executed: RL-Kernel linear_logp (FusedLinearLogpSM90Op, no fallback at any of 30 train steps)" in done.stdout
    summary = (out / "summary.md").read_text()
    table = [line for line in summary.splitlines() if line.startswith("| baseline |") or line.startswith("| candidate |")]
    assert len(table) == 2 and "BF16 train + FP8 rollout" in table[0] and "enable-rl-kernel" in table[1], table
    assert "**Contract held**" in summary
    data = json.loads((out / "ab.json").read_text())
    assert [a["question"] for a in data["answers"]] == [
        "Does the candidate reduce train_rollout_logprob_abs_diff?",
        "Does it preserve or improve rollout/raw_reward?",
        "Does it improve rollout throughput or logprob recomputation time?",
    ]
    assert all(a["message"] for a in data["answers"])
    performance = {row["figure"]["key"]: row for row in data["performance"]}
    for key in (
        "perf/step_time",
        "perf/rollout_time",
        "perf/log_probs_time",
        "perf/update_weights_time",
        "perf/actor_train_tok_per_s",
        "memory/peak_used_gib",
        "vllm/kv_cache_usage_pct",
    ):
        row = performance[key]
        assert row["baseline"]["n"] == row["candidate"]["n"] == ROLLOUTS - int(knobs.threshold("warmup_steps")), (key, row)
        assert row["baseline"]["ci"][0] <= row["baseline"]["mean"] <= row["baseline"]["ci"][1], (key, row)
        assert row["difference_ci"] is not None, (key, row)
    fallbacks = performance["rl_kernel/fallbacks"]
    assert fallbacks["candidate"]["mean"] == 0.0 and fallbacks["note"] == "not logged by the baseline"
    assert "## Performance" in summary and "peak GPU memory used" in summary


def test_a_candidate_whose_operator_fell_back_fails_the_gate(cluster, tmp_path):
    _, knobs = cluster
    baseline, candidate = _pair(knobs)
    _run_stand_in(render_argv(baseline.flags), tmp_path / "baseline.log")
    _run_stand_in(render_argv(candidate.flags), tmp_path / "candidate.log", {"STANDIN_RLK_FALLBACK": "linear_logp backend missing"})
    out = tmp_path / "judged"
    done = _harness(
        "judge",
        "--baseline",
        str(tmp_path / "baseline.log"),
        "--candidate",
        str(tmp_path / "candidate.log"),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--out",
        str(out),
    )
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "CONTRACT candidate not executed: RL-Kernel linear_logp fell back (log.txt line" in done.stdout, done.stdout
    assert "linear_logp backend missing" in done.stdout


def test_two_different_logs_under_one_run_id_is_an_error_naming_both(cluster, tmp_path):
    _, knobs = cluster
    baseline, _ = _pair(knobs)
    _run_stand_in(render_argv(baseline.flags), tmp_path / "first.log")
    # The same flags (so the same run id), another run: its own noise makes another log.
    _run_stand_in(render_argv(baseline.flags), tmp_path / "second.log", {"STANDIN_RLK_FALLBACK": "x"})
    assert (tmp_path / "first.log").read_bytes() != (tmp_path / "second.log").read_bytes()
    runs = tmp_path / "runs"
    first = _harness("ingest", str(tmp_path / "first.log"), "--runs-dir", str(runs))
    assert first.returncode == 0, first.stderr
    again = _harness("ingest", str(tmp_path / "first.log"), "--runs-dir", str(runs))  # the same file again replaces it
    assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
    second = _harness("ingest", str(tmp_path / "second.log"), "--runs-dir", str(runs))
    assert second.returncode == 2, second.stdout + second.stderr
    (line,) = [line for line in second.stderr.splitlines() if "two different logs under one run id" in line]
    assert str(tmp_path / "first.log") in line and str(tmp_path / "second.log") in line, line
