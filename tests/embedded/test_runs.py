"""Each knob of the embedded trainer, checked with a short real run (2 rollouts, 16 samples each).

Thresholds come from knobs/thresholds.yaml by name; nothing here is a literal figure.
"""

from __future__ import annotations

import json

import pytest
import torch

from conftest import assert_finished

ABS_DIFF = "train/train_rollout_logprob_abs_diff"
VIME_NAMES = {
    "step": [
        "train/train_rollout_logprob_abs_diff",
        "train/ppo_kl",
        "train/pg_clipfrac",
        "train/loss",
        "train/pg_loss",
        "train/grad_norm",
        "train/entropy_loss",
    ],
    "rollout": [
        "rollout/raw_reward",
        "rollout/log_probs",
        "rollout/rollout_log_probs",
        "rollout/response_len/mean",
        "rollout/response_len/max",
        "rollout/truncated_ratio",
        "rollout/advantages",
    ],
    "perf": [
        "perf/step_time",
        "perf/rollout_time",
        "perf/log_probs_time",
        "perf/update_weights_time",
        "perf/train_time",
        "perf/tokens_per_cpu_per_sec",
        "perf/peak_memory_gb",
    ],
}


def test_fp32_both_sides_sits_at_the_float_floor(trainer, thresholds):
    run = trainer("--colocate")
    assert_finished(run)
    assert run.mean("step", ABS_DIFF) <= thresholds["fp32_floor_max_abs_diff"]
    for kind, names in VIME_NAMES.items():
        for step, metrics in run.lines[kind].items():
            assert set(names) <= set(metrics), (kind, step, set(names) - set(metrics))
    assert "rl_kernel.execution_decision {" in run.stdout


def test_a_finished_embedded_log_ingested_on_its_own_reads_finished(trainer, tmp_path):
    """The trainer prints its arguments as Megatron does and no end line, as VIME's train.py: its
    log.txt alone reads finished because its records cover every rollout below the num_rollout it
    printed, and a log cut before its last rollout reads unfinished at that rollout."""
    from harness.records.ingest import ingest

    run = trainer("--colocate")
    assert_finished(run)
    assert "training finished" not in run.stdout
    log = tmp_path / "log.txt"
    log.write_text(run.stdout)
    result = ingest(log)
    assert result.state() == "finished", (result.note, result.problems)
    last = result.num_rollout - 1
    cut = tmp_path / "cut" / "log.txt"
    cut.parent.mkdir()
    cut.write_text(run.stdout.split(f"rollout {last}: ")[0].rsplit("\n", 1)[0] + "\n")
    cut_result = ingest(cut)
    assert cut_result.state() == "unfinished"
    assert f"unfinished at rollout {last} of {result.num_rollout}" in cut_result.note


def test_fp32_run_writes_vime_dumps_probes_and_record(trainer):
    run = trainer("--colocate")
    assert_finished(run)
    dumps = run.out_dir / "dumps"
    rollout = torch.load(dumps / "rollout_1.pt", weights_only=False)
    assert rollout["rollout_id"] == 1 and len(rollout["samples"]) == 16
    for s in rollout["samples"]:
        assert len(s["rollout_log_probs"]) == s["response_length"] == len(s["loss_mask"])
        assert s["tokens"] == s["prompt_ids"] + s["response_ids"]
    train = torch.load(dumps / "train_1_0.pt", weights_only=False)
    assert train["rank"] == 0 and set(train["rollout_data"]) >= {"tokens", "log_probs", "rollout_log_probs", "loss_masks"}
    for s in train["samples"]:
        assert len(s["log_probs"]) == len(s["rollout_log_probs"]) == len(s["response_ids"])
        assert s["weight_version_rollout"] == s["weight_version_trainer"] == 1
        side = s["consistency_metadata"]
        assert side["rollout"]["token_ids_sha"] == side["trainer"]["token_ids_sha"]
        assert all(s["inside_filter_set"]) and min(s["sampled_token_rank_trainer"]) >= 1
    probe = torch.load(dumps / "probe_1.pt", weights_only=False)
    first = probe["samples"][0]
    assert len(probe["samples"]) == 2
    hidden, head = first["hidden_states"], probe["lm_head_weight"]
    replay = torch.log_softmax(hidden @ head.T / first["sampling"]["temperature"], -1)
    replay = replay.gather(-1, first["target_ids"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(replay, first["trainer_log_probs"], atol=1e-5)  # the bundle reproduces the trainer
    record = json.loads((run.out_dir / "embedded_record.json").read_text())
    assert record["model"]["hash"] and record["libraries"]["megatron-core"]
    assert record["engine_mode"].startswith("colocate")


def test_bf16_rollout_is_clearly_larger(trainer, thresholds):
    floor = trainer("--colocate")
    bf16 = trainer("--colocate", "--vllm-dtype", "bfloat16")
    assert_finished(bf16)
    delta = bf16.mean("step", ABS_DIFF) - floor.mean("step", ABS_DIFF)
    assert delta >= thresholds["rung_min_abs_delta"], delta


def test_top_p_drift_rises_and_the_contract_replay_removes_it(trainer, thresholds):
    floor = trainer("--colocate").mean("step", ABS_DIFF)
    filtered = trainer("--colocate", "--rollout-top-p", "0.9", "--rollout-top-k", "40")
    replayed = trainer("--colocate", "--rollout-top-p", "0.9", "--rollout-top-k", "40", "--embedded-replay-processed-logprobs")
    assert_finished(filtered)
    assert_finished(replayed)
    raised, after = filtered.mean("step", ABS_DIFF), replayed.mean("step", ABS_DIFF)
    assert raised - floor >= thresholds["rung_min_abs_delta"], raised
    assert (raised - after) / (raised - floor) >= thresholds["semantic_replay_min_removed_fraction"]
    assert after <= thresholds["fp32_floor_max_abs_diff"], after
    assert '"actual_backend": "processed-replay"' in replayed.stdout


@pytest.mark.parametrize(
    "fault, extra",
    [
        ("token-shift", []),
        ("mask-off-by-one", []),
        ("reorder-samples", []),
        # T=1 would make ignoring it a no-op; the clean T=0.8 run sits at the floor (temperature rung).
        ("no-temperature", ["--rollout-temperature", "0.8"]),
    ],
)
def test_each_injected_fault_moves_the_metric(trainer, thresholds, fault, extra):
    clean = trainer("--colocate")
    faulty = trainer("--colocate", *extra, "--embedded-inject", fault)
    assert_finished(faulty)
    delta = faulty.mean("step", ABS_DIFF) - clean.mean("step", ABS_DIFF)
    assert delta >= thresholds["rung_min_abs_delta"], delta
    record = json.loads((faulty.out_dir / "embedded_record.json").read_text())
    assert record["injections"] == [fault]


def test_stale_weights_moves_the_metric_on_the_stale_step_only(trainer, thresholds):
    """stale-weights:1 skips the sync after rollout 0: rollout 1 samples with version 0 while the
    trainer recomputes with version 1; rollout 0 is clean (both at version 0)."""
    run = trainer("--colocate", "--lr", "1e-3", "--embedded-inject", "stale-weights:1")
    assert_finished(run)
    clean_step, stale_step = run.lines["step"][0][ABS_DIFF], run.lines["step"][1][ABS_DIFF]
    assert clean_step <= thresholds["fp32_floor_max_abs_diff"]
    assert stale_step - clean_step >= thresholds["rung_min_abs_delta"], (clean_step, stale_step)
    assert run.lines["perf"][0]["perf/weights_synced"] == 0.0 and run.lines["perf"][1]["perf/weights_synced"] == 1.0
    train = torch.load(run.out_dir / "dumps" / "train_1_0.pt", weights_only=False)
    assert {(s["weight_version_rollout"], s["weight_version_trainer"]) for s in train["samples"]} == {(0, 1)}
