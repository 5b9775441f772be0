"""vLLM's top-k / top-p logit filter, for the 'processed' log-prob contract.

vLLM's processed log-probs are the log-softmax of the logits after temperature and after top-k/top-p
set everything outside the kept set to -inf. We call vLLM's own PyTorch implementation when vLLM is
importable (the CPU stack has it); on the H200 image vLLM is absent, so the same function is
transcribed below, and tests/operators/test_parity_with_upstream.py checks the transcription against
vLLM bitwise wherever both exist.
"""

from __future__ import annotations

import torch

# The ladder's filter rungs (knobs/ladder/top-k.yaml, top-p.yaml) use these values.
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95


def _upstream():
    try:
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
    except Exception:  # vLLM absent or not importable on this machine
        return None
    return apply_top_k_top_p_pytorch


def apply_top_k_top_p_transcribed(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """vLLM 0.32 ``apply_top_k_top_p_pytorch`` (sort path), line for line. Updates ``logits`` in place."""
    if p is None and k is None:
        return logits
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        top_k_mask = logits_sort.size(1) - k.to(torch.long)
        top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
        top_k_mask = logits_sort < top_k_mask
        logits_sort.masked_fill_(top_k_mask, -float("inf"))
    if p is not None:
        probs_sort = logits_sort.softmax(dim=-1)
        probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
    return logits.scatter_(dim=-1, index=logits_idx, src=logits_sort)


def apply_top_k_top_p(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> tuple[torch.Tensor, str]:
    """Filter ``logits`` [T, V] in place; returns (logits, which implementation ran)."""
    rows = logits.shape[0]
    k = None if top_k is None else torch.full((rows,), top_k, dtype=torch.long, device=logits.device)
    p = None if top_p is None else torch.full((rows,), top_p, dtype=logits.dtype, device=logits.device)
    upstream = _upstream()
    if upstream is not None:
        # allow_cpu_sync=False keeps the sort path for top-k alone too, the path vLLM takes on GPU.
        return upstream(logits, k, p, allow_cpu_sync=False), "vllm.v1.sample.ops.topk_topp_sampler.apply_top_k_top_p_pytorch"
    return apply_top_k_top_p_transcribed(logits, k, p), "transcribed apply_top_k_top_p_pytorch (vLLM 0.32)"
