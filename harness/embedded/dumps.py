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


# Where each train-dump field probe 1 compares comes from. The trainer runs in the same process as
# the rollout's Sample objects, so some fields are that object written a second time: comparing them
# with the rollout dump compares a thing with itself. They are declared here, in the trainer's
# consistency record, and probe 1 reports them without counting them (harness.attribution.consistency).
COPIED_FROM_SAMPLE = {
    "tokens": "the Sample's prompt + response ids",
    "prompt_ids": "the Sample's prompt ids",
    "response_ids": "the Sample's response ids",
    "response_length": "len(Sample.response_ids)",
    "consistency_metadata.token_ids_sha": "hash of the Sample's tokens",
    "consistency_metadata.response_ids_sha": "hash of the Sample's response ids",
    "consistency_metadata.loss_mask_sha": "hash of the Sample's loss mask",
    "consistency_metadata.tokenizer_sha": "the same tokenizer hash the rollout recorded",
    "consistency_metadata.sampling_params_sha": "the same sampling parameters the rollout recorded",
}
COMPUTED_BY_TRAINER = {
    "target_ids": "the ids its log-prob gather read (harness.layout.token_shift.response_gather_positions on the row fed to the model)",
    "loss_mask": "the mask its loss and logged abs-diff applied (harness.layout.token_shift.response_loss_mask)",
    "rollout_log_probs": "the rollout log-probs as they reached its loss",
    "log_probs": "its own recompute",
}


def train_dump(
    template: str,
    rollout_id: int,
    rank: int,
    samples: list[Sample],
    views: list[TrainerView],
    sampling: dict,
    tp: int,
    rollout_lp_seen: list[list[float]],
    applied_masks: list[torch.Tensor],
) -> Path:
    """`applied_masks`: per sample the loss mask the trainer's loss applied (not the Sample's own)."""
    per_sample = []
    provenance = {"copied_from_rollout_sample": COPIED_FROM_SAMPLE, "computed_by_trainer": COMPUTED_BY_TRAINER}
    for s, v, seen, mask in zip(samples, views, rollout_lp_seen, applied_masks):
        per_sample.append(
            {
                "index": s.index,
                "prompt_ids": s.prompt_ids,
                "response_ids": s.response_ids,
                "target_ids": None if v.target_ids is None else v.target_ids.tolist(),
                "loss_mask": mask.tolist(),
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
                "consistency_metadata": {"rollout": v.rollout_fingerprint, "trainer": {**v.fingerprint, "provenance": provenance}},
            }
        )
        if v.routed_experts is not None:  # MoE: where the recompute dispatched each forwarded token
            per_sample[-1]["trainer_routed_experts"] = v.routed_experts
    data = {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [len(s.response_ids) for s in samples],
        "rewards": [s.reward for s in samples],
        "advantages": [s.advantage for s in samples],
        "loss_masks": [mask.tolist() for mask in applied_masks],
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


# The rollouts whose weights a run keeps for the drift budget's re-score (harness.embedded.lever_score):
# every second rollout from the first the judge uses (after its warm-up), 14 of a 30-rollout run.
WEIGHTS_FIRST, WEIGHTS_EVERY = 2, 2


def weights_due(rollout_id: int) -> bool:
    return rollout_id >= WEIGHTS_FIRST and (rollout_id - WEIGHTS_FIRST) % WEIGHTS_EVERY == 0


def weights(directory: Path, rollout_id: int, hf_state: dict, version: int) -> Path:
    """`weights_{rollout_id}.pt`: the trainer's HF state dict at weight version `version`, the weights
    the engine generated rollout `rollout_id` with (fp8-quantised on the way in, where it quantises)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"weights_{rollout_id}.pt"
    _save({"rollout_id": rollout_id, "weight_version": version, "weights": hf_state}, path)
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
