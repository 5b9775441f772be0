"""The records that flow through one step: a rollout sample, and what the trainer computed for it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import torch


@dataclass
class Sample:
    index: int  # position in the rollout batch (prompt-major, VIME's order)
    group_index: int  # the prompt it answers
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    rollout_ranks: list[int | None]
    loss_mask: list[int]
    label: str
    response_text: str
    finish_reason: str
    rollout_weight_version: int
    reward: float = 0.0
    advantage: float = 0.0
    rollout_fingerprint: dict = field(default_factory=dict)
    # MoE with --use-rollout-routing-replay: vLLM's expert ids, [len(tokens) - 1, MoE layers, top-k]
    rollout_routed_experts: object = None

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class TrainerView:
    """Per sample, the trainer's no-grad recompute (old log-probs) and its diagnostics."""

    log_probs: torch.Tensor  # [response_len], fp32
    rank: torch.Tensor
    inside_filter_set: torch.Tensor
    vocab_shard: torch.Tensor
    entropy: torch.Tensor
    micro_batch: int
    offset: int  # position inside its micro-batch
    weight_version: int
    fingerprint: dict = field(default_factory=dict)
    # the rollout record whose log-probs reached the trainer for this sample
    rollout_fingerprint: dict = field(default_factory=dict)
    # MoE: the experts the recompute dispatched each forwarded token to, [len(tokens) - 1, layers, top-k]
    routed_experts: torch.Tensor | None = None
    # The target ids the recompute's log-prob gather read (harness.layout.token_shift's positions on
    # the token row fed to the model): the trainer's own, written to the train dump for probe 1.
    target_ids: torch.Tensor | None = None


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(
    *,
    token_ids,
    response_ids,
    loss_mask,
    sampling: dict,
    tokenizer_hash: str,
    weight_version: int,
    dp_rank: int,
    micro_batch: int | None,
    offset: int | None,
) -> dict:
    """RL-Align-style consistency metadata: hashes both sides compute the same way."""
    return {
        "token_ids_sha": _digest(list(token_ids)),
        "response_ids_sha": _digest(list(response_ids)),
        "loss_mask_sha": _digest(list(loss_mask)),
        "sampling_params_sha": _digest(sampling),
        "tokenizer_sha": tokenizer_hash,
        "weight_version": weight_version,
        "batch_layout": {"dp_rank": dp_rank, "micro_batch": micro_batch, "offset": offset},
    }
