"""Selected-token log-probs computed as vLLM's sampler computes them (processed mode).

vLLM: logits to fp32, divided in place by a per-request fp32 temperature tensor (broadcast over
the vocabulary), top-k/top-p masked to -inf when set, then ``log_softmax(dim=-1, dtype=float32)``.
Megatron's vocab-parallel cross entropy (max-subtract, exp, sum, log) reaches the same value by
another path and differed in the last bits on 76% of tokens; dividing by a Python float instead of
a tensor may differ too. Here the ops are vLLM's, in vLLM's order, on the full vocabulary.
"""

from __future__ import annotations

import torch

from harness.embedded import logprobs as lp


def engine_scaled_logits(full_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    temp = torch.full((full_logits.shape[0], 1), temperature, dtype=torch.float32)
    return full_logits.to(torch.float32) / temp


def engine_logprobs(
    full_logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float, replay: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs of ``targets`` [N], True where a target fell outside the replayed top-k/top-p set:
    there the unfiltered log-prob stands, as in harness.embedded.logprobs.replay_logprobs).
    Without ``replay`` the filters are not applied (the trainer's native contract)."""
    scaled = engine_scaled_logits(full_logits, temperature)
    plain = scaled.log_softmax(dim=-1, dtype=torch.float32)
    t = targets.unsqueeze(-1)
    if not replay:
        return plain.gather(-1, t).squeeze(-1), torch.zeros_like(targets, dtype=torch.bool)
    keep = lp.processed_mask(scaled.detach(), top_k, top_p)
    filtered = scaled.masked_fill(~keep, float("-inf")).log_softmax(dim=-1, dtype=torch.float32)
    inside = keep.gather(-1, t).squeeze(-1)
    chosen = torch.where(inside, filtered.gather(-1, t).squeeze(-1), plain.gather(-1, t).squeeze(-1))
    return chosen, ~inside
