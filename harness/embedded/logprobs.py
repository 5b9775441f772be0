"""Selected-token log-probs on the trainer side, VIME's way and the replayed-contract way.

- ``native``: Megatron's vocab-parallel cross entropy on fp32 logits divided by the rollout
  temperature (all-reduced max, then sum of exps, across TP ranks) — what VIME's Megatron does.
- ``processed-replay`` (``--embedded-replay-processed-logprobs``): the full vocabulary (gathered
  across TP) with vLLM's processed contract replayed: temperature, then top-k, then top-p
  masking (vLLM's ``apply_top_k_top_p`` order and tie rules), renormalised.
Diagnostics (no grad): the sampled token's rank, whether it lies inside the top-k/top-p set, and
its vocab shard under TP.
"""

from __future__ import annotations

import json
import logging

import torch

NATIVE = "native"
REPLAY = "processed-replay"
TRUE_ON_POLICY = "true-on-policy"  # --embedded-true-on-policy: harness.embedded.true_on_policy.logprobs
IMPLEMENTATIONS = {
    NATIVE: "megatron.core.tensor_parallel.vocab_parallel_cross_entropy",
    REPLAY: "harness.embedded.logprobs.replay_logprobs (full vocab gathered)",
    TRUE_ON_POLICY: "harness.embedded.true_on_policy.logprobs.engine_logprobs (full vocab gathered, vLLM's sampler ops)",
}


def _tp():
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_group()


def vocab_parallel_logprobs(logits_shard: torch.Tensor, targets: torch.Tensor, temperature: float, gather_row: bool = False) -> torch.Tensor:
    """Megatron's vocab-parallel cross entropy, negated. ``gather_row`` (the gather lever, TP=1): the
    same max, sum of exps and log, subtracted from the whole row and the target read from that row
    with ``gather``, as the engine reads its log-softmax row, instead of Megatron's gather of the
    target's logit before the subtraction."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    scaled = logits_shard.float() / temperature
    if gather_row and _tp()[0] == 1:
        shifted = scaled - scaled.max(dim=-1, keepdim=True).values
        row = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
        return row.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -vocab_parallel_cross_entropy(scaled, targets)


def gather_full_vocab(logits_shard: torch.Tensor) -> torch.Tensor:
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    return gather_from_tensor_model_parallel_region(logits_shard)


def processed_mask(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """True where vLLM's sampler would keep the token (its apply_top_k_top_p, ascending sort)."""
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if top_k is not None and 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        keep &= scaled >= kth
    if top_p is not None and top_p < 1.0:
        masked = scaled.masked_fill(~keep, float("-inf"))
        sorted_logits, idx = masked.sort(dim=-1, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cum <= 1 - top_p
        drop_sorted[..., -1] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        keep &= ~drop
    return keep


def replay_logprobs(
    full_logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs under the processed contract, True where the target fell outside the kept set:
    there the plain temperature log-prob is used instead of -inf)."""
    scaled = full_logits.float() / temperature
    keep = processed_mask(scaled.detach(), top_k, top_p)
    filtered = torch.log_softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
    plain = torch.log_softmax(scaled, dim=-1)
    t = targets.unsqueeze(-1)
    inside = keep.gather(-1, t).squeeze(-1)
    chosen = torch.where(inside, filtered.gather(-1, t).squeeze(-1), plain.gather(-1, t).squeeze(-1))
    return chosen, ~inside


@torch.no_grad()
def token_diagnostics(
    full_logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float, tp: int
) -> dict[str, torch.Tensor]:
    scaled = full_logits.float() / temperature
    target_logit = scaled.gather(-1, targets.unsqueeze(-1))
    rank = (scaled > target_logit).sum(-1) + 1
    inside = processed_mask(scaled, top_k, top_p).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    probs = scaled.softmax(-1)
    entropy = -(probs * torch.log_softmax(scaled, -1)).sum(-1)
    shard = targets // (scaled.shape[-1] // tp)
    return {"rank": rank, "inside_filter_set": inside, "vocab_shard": shard, "entropy": entropy}


def _operator_implementation(name: str) -> str:
    """--embedded-logprob-operator NAME: the registry operator both engines run."""
    from harness.operators import registry

    op = registry.get(name)
    return f"harness.operators.registry {name!r} in the trainer and in vLLM's sampler: {op.contract.summary}"


def execution_decision(
    logger: logging.Logger, *, backend: str, ran: dict[str, int], dtype: str, tp: int, rank: int, fallback_tokens: int = 0
) -> dict:
    """RL-Align's ``rl_kernel.execution_decision {json}`` record for the log-prob path used.

    ``backend`` is what the flags asked for; ``ran`` the tokens each operator's calls returned in
    this step's recompute, counted after the call (harness.embedded.operator_calls). The actual
    backend is what was counted: an operator other than the requested one, or none, is a fallback.
    """
    actual = "+".join(sorted(ran)) or "none"
    executed = actual == backend
    record = {
        "op": "linear_logp",
        "requested_backend": backend,
        "actual_backend": actual,
        "decision": ("native" if backend == NATIVE else "optimized") if executed else "fallback-not-executed",
        "fallback_reason": None if executed else f"the recompute counted {ran or 'no tokens'}, not {backend!r} alone",
        "counted_tokens": dict(ran),
        "dtype": dtype,
        "logits_dtype": "float32",
        "tp_size": tp,
        "tp_rank": rank,
        "cp_size": 1,
        "implementation": IMPLEMENTATIONS.get(backend) or _operator_implementation(backend),
        "tokens_outside_replayed_set": fallback_tokens,
    }
    logger.info("rl_kernel.execution_decision %s", json.dumps(record, sort_keys=True), stacklevel=2)
    return record
