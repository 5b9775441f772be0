"""Probe 5 on the vocab shards a TP run recorded, with bundles and shard dumps written by the
trainer's own writers (harness.embedded.dumps) from logits whose merge is known by construction."""

from __future__ import annotations

import pytest
import torch

from harness.attribution.probe_bundle import read_bundle
from harness.attribution.probe_vocab_shards import MEGATRON_MERGE, probe_vocab_parallel_shards
from harness.embedded import dumps

pytestmark = pytest.mark.attribution

VOCAB, HIDDEN, FLOOR = 64, 8, 1e-4


def _write(tmp_path, tp: int, *, run_error: float = 0.0, merge_path: str = MEGATRON_MERGE, ranks: int | None = None):
    """A probe bundle and its ranks' shard dumps for two samples; the trainer's log-probs are the
    full-vocabulary fp32 reduce plus `run_error` (a merge that drifts by that much)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen)
    probes, shard_rows = [], [[] for _ in range(tp)]
    for index, length in ((0, 5), (1, 7)):
        hidden = torch.randn(length, HIDDEN, generator=gen)
        targets = torch.randint(0, VOCAB, (length,), generator=gen)
        logits = hidden @ weight.T
        trainer_lp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1) + run_error
        probes.append(
            {
                "index": index,
                "hidden_states": hidden,
                "target_ids": targets,
                "loss_mask": torch.ones(length),
                "sampling": {"temperature": 1.0},
                "rollout_log_probs": trainer_lp.clone(),
                "trainer_log_probs": trainer_lp,
            }
        )
        for rank, shard in enumerate(logits.split(VOCAB // tp, dim=-1)):
            shard_rows[rank].append({"index": index, "logits_shard": shard.clone(), "target_ids": targets})
    dumps.probe_bundle(tmp_path, 3, probes, weight, {"tp_size": tp, "train_dtype": "float32", "rollout_dtype": "float32"})
    for rank in range(tp if ranks is None else ranks):
        dumps.vocab_shards(tmp_path, 3, rank, tp, shard_rows[rank], merge_path, 1.0)
    return read_bundle(tmp_path / "probe_3.pt")


def test_the_runs_merge_within_the_floor_passes_on_its_own_shards(tmp_path):
    result = probe_vocab_parallel_shards(_write(tmp_path, 2), 2, FLOOR)
    evidence = result["evidence"]
    assert not result["localised"] and "skipped" not in result
    assert evidence["tokens"] == 12 and "vocab_shards_3_0.pt" in evidence["source"]
    assert evidence["run_merge_vs_full"]["max"] < 1e-5 and evidence["layout_merge_vs_full"]["max"] < 1e-5
    assert evidence["fixed_order_bitwise_equal"]


def test_a_run_merge_that_drifts_is_localised_to_the_merge(tmp_path):
    result = probe_vocab_parallel_shards(_write(tmp_path, 2, run_error=1e-3), 2, FLOOR)
    assert result["localised"] and result["boundary"] == "vocab-parallel log-sum-exp merge over TP=2"
    assert result["evidence"]["run_merge_vs_full"]["mean"] == pytest.approx(1e-3, rel=1e-3)


def test_a_path_without_megatrons_merge_checks_the_layout_merge_on_the_shards(tmp_path):
    # the replayed contract gathers the full vocabulary: the trainer's log-probs are not the merge's
    result = probe_vocab_parallel_shards(_write(tmp_path, 2, run_error=1e-3, merge_path="full vocabulary gathered"), 2, FLOOR)
    assert not result["localised"] and "run_merge_vs_full" not in result["evidence"]
    assert "full vocabulary gathered" in result["evidence"]["note"]


def test_tp1_is_not_checked_and_not_applicable(tmp_path):
    result = probe_vocab_parallel_shards(_write(tmp_path, 1, ranks=0), 1, FLOOR)
    assert result["skipped"] == "the run used TP=1: no vocab-parallel merge ran" and result["not_applicable"]


def test_a_missing_rank_is_not_checked_and_named(tmp_path):
    result = probe_vocab_parallel_shards(_write(tmp_path, 2, ranks=1), 2, FLOOR)
    assert "vocab_shards_3_1.pt missing" in result["skipped"] and not result.get("not_applicable")


def test_shards_of_other_tokens_are_not_checked(tmp_path):
    bundle = _write(tmp_path, 2)
    data = torch.load(tmp_path / "vocab_shards_3_1.pt", weights_only=False)
    data["samples"][1]["target_ids"] = (data["samples"][1]["target_ids"] + 1) % VOCAB
    torch.save(data, tmp_path / "vocab_shards_3_1.pt")
    result = probe_vocab_parallel_shards(bundle, 2, FLOOR)
    assert result["skipped"] == "vocab_shards_3_1.pt: sample 1's tokens differ from the probe bundle's"
