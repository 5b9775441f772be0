"""VIME-format debug dumps (``torch.save`` of dicts) plus the lab's extra per-sample fields, and
probe bundles. Every field is documented in docs/embedded.md."""

from __future__ import annotations

from pathlib import Path

import torch

from harness.embedded.samples import Sample, TrainerView


def _path(template: str, **fields) -> Path:
    path = Path(template.format(**fields))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)  # atomic: a killed run never leaves half a dump


def rollout_dump(template: str, rollout_id: int, samples: list[Sample], sampling: dict) -> Path:
    rows = []
    for s in samples:
        rows.append(
            {
                "index": s.index,
                "group_index": s.group_index,
                "tokens": s.tokens,
                "response_length": len(s.response_ids),
                "reward": s.reward,
                "loss_mask": s.loss_mask,
                "rollout_log_probs": s.rollout_log_probs,
                "weight_versions": [s.rollout_weight_version],
                "metadata": {"label": s.label, "finish_reason": s.finish_reason, "response_text": s.response_text},
                # lab extras
                "prompt_ids": s.prompt_ids,
                "response_ids": s.response_ids,
                "sampling_params": sampling,
                "rollout_ranks": s.rollout_ranks,
                "consistency_metadata": s.rollout_fingerprint,
            }
        )
        if s.rollout_routed_experts is not None:  # VIME's field: [len(tokens) - 1, MoE layers, top-k]
            rows[-1]["rollout_routed_experts"] = torch.as_tensor(s.rollout_routed_experts)
    path = _path(template, rollout_id=rollout_id)
    _save({"rollout_id": rollout_id, "samples": rows}, path)
    return path


def train_dump(
    template: str,
    rollout_id: int,
    rank: int,
    samples: list[Sample],
    views: list[TrainerView],
    sampling: dict,
    tp: int,
    rollout_lp_seen: list[list[float]],
) -> Path:
    per_sample = []
    for s, v, seen in zip(samples, views, rollout_lp_seen):
        per_sample.append(
            {
                "index": s.index,
                "prompt_ids": s.prompt_ids,
                "response_ids": s.response_ids,
                "loss_mask": s.loss_mask,
                "rollout_log_probs": seen,
                "log_probs": v.log_probs.tolist(),
                "weight_version_rollout": s.rollout_weight_version,
                "weight_version_trainer": v.weight_version,
                "sampling_params": sampling,
                "sampled_token_rank_trainer": v.rank.tolist(),
                "sampled_token_rank_rollout": s.rollout_ranks,
                "inside_filter_set": v.inside_filter_set.tolist(),
                "entropy": v.entropy.tolist(),  # the trainer's per-token entropy: the audit correlates dlogp with it
                "vocab_shard": v.vocab_shard.tolist(),
                "tp_size": tp,
                "consistency_metadata": {"rollout": v.rollout_fingerprint, "trainer": v.fingerprint},
            }
        )
        if v.routed_experts is not None:  # MoE: where the recompute dispatched each forwarded token
            per_sample[-1]["trainer_routed_experts"] = v.routed_experts
    data = {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [len(s.response_ids) for s in samples],
        "rewards": [s.reward for s in samples],
        "advantages": [s.advantage for s in samples],
        "loss_masks": [s.loss_mask for s in samples],
        "log_probs": [v.log_probs.tolist() for v in views],
        "rollout_log_probs": rollout_lp_seen,
        "dp_shards": [{"dp_rank": 0, "micro_batch": v.micro_batch, "offset": v.offset, "index": s.index} for s, v in zip(samples, views)],
    }
    path = _path(template, rollout_id=rollout_id, rank=rank)
    _save({"rollout_id": rollout_id, "rank": rank, "format": 2, "rollout_data": data, "samples": per_sample}, path)
    return path


def probe_bundle(directory: Path, rollout_id: int, probes: list[dict], lm_head: torch.Tensor, policy: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"probe_{rollout_id}.pt"
    _save({"rollout_id": rollout_id, "lm_head_weight": lm_head, "policy": policy, "samples": probes}, path)
    return path


def vocab_shards(directory: Path, rollout_id: int, rank: int, tp_size: int, rows: list[dict], merge_path: str, temperature: float) -> Path:
    """Under TP, each rank's vocab shard of the probe samples' logits / T (fp32, the merge's input),
    one file per rank: `vocab_shards_{rollout_id}_{rank}.pt`, read by probe 5."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"vocab_shards_{rollout_id}_{rank}.pt"
    width = rows[0]["logits_shard"].shape[-1]
    data = {
        "rollout_id": rollout_id,
        "tp_rank": rank,
        "tp_size": tp_size,
        "vocab_start": rank * width,
        "vocab_end": (rank + 1) * width,
        "merge_path": merge_path,
        "temperature": temperature,
        "holds": "per probe sample: this rank's vocab shard of the trainer's logits / T at the response positions (fp32) and the target ids",
        "samples": rows,
    }
    _save(data, path)
    return path
