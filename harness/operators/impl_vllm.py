"""vLLM-native: bf16 logits from the LM head, fp32 log-softmax, gather (processed_logprobs mode).

vLLM's LogitsProcessor returns the GEMM's bf16 logits (gathered over TP ranks: vLLM all-gathers the
vocab shards, so TP changes nothing after the GEMM); the v1 Sampler upcasts to fp32, divides by the
temperature, applies top-k/top-p, and in ``processed_logprobs`` mode takes
``log_softmax(dim=-1, dtype=float32)`` of that. The processed variant here uses the ladder's filter
values (sampling_filters.DEFAULT_TOP_K / DEFAULT_TOP_P).
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator
from harness.operators.registry import register
from harness.operators.sampling_filters import DEFAULT_TOP_K, DEFAULT_TOP_P, apply_top_k_top_p

# Rows per pass: bounds the fp32 copy of the logits (8192 x 151936 fp32 would be 5 GiB). Row
# chunking changes no value here: each row's log-softmax is independent of the other rows.
ROW_CHUNK = 2048


def vllm_logits(hidden: torch.Tensor, weight: torch.Tensor, tp_size: int) -> torch.Tensor:
    """bf16 logits [T, V]: one GEMM per vocab shard, all-gathered (concatenated) in rank order."""
    if tp_size == 1:
        return hidden @ weight.T
    return torch.cat([hidden @ w.T for w in weight.chunk(tp_size, dim=0)], dim=-1)


def vllm_selected(logits_bf16, targets, temperature, top_k=None, top_p=None) -> torch.Tensor:
    out = torch.empty(logits_bf16.shape[0], dtype=torch.float32, device=logits_bf16.device)
    for r0 in range(0, logits_bf16.shape[0], ROW_CHUNK):
        logits = logits_bf16[r0 : r0 + ROW_CHUNK].to(torch.float32)
        logits.div_(temperature)
        if top_k is not None or top_p is not None:
            logits, _ = apply_top_k_top_p(logits, top_k, top_p)
        logp = logits.log_softmax(dim=-1, dtype=torch.float32)  # Sampler.compute_logprobs
        out[r0 : r0 + ROW_CHUNK] = logp.gather(1, targets[r0 : r0 + ROW_CHUNK, None]).squeeze(1)
        del logits, logp
    return out


_CONTRACT = dict(
    operand_dtype="bfloat16",
    accumulate_dtype="float32 (cuBLAS), output rounded to bf16",
    logits_dtype="bfloat16, upcast to float32",
    reduction_order="torch log_softmax over the full gathered row",
    tp_handling="vocab shards all-gathered into full bf16 rows before the softmax: TP cannot change the reduction",
    batch_invariant_by_design=False,
    tp_invariant_by_design=True,
)


@register("vllm-native")
class VllmNative(Operator):
    contract = Contract(
        summary="vLLM: bf16 logits, fp32 / T, fp32 log_softmax, gather (no filters)",
        rounds_at=["logits to bf16 at the GEMM output", "fp32 / T", "fp32 log-softmax"],
        **_CONTRACT,
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        return vllm_selected(vllm_logits(hidden, weight, tp_size), targets, temperature)


@register("vllm-processed")
class VllmProcessed(Operator):
    top_k = DEFAULT_TOP_K
    top_p = DEFAULT_TOP_P
    contract = Contract(
        summary=f"vLLM processed_logprobs: as vllm-native plus top_k={DEFAULT_TOP_K}, top_p={DEFAULT_TOP_P} renormalisation",
        rounds_at=["logits to bf16 at the GEMM output", "fp32 / T", "fp32 softmax+cumsum for top-p", "fp32 log-softmax over the kept set"],
        semantics="processed",
        **_CONTRACT,
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        return vllm_selected(vllm_logits(hidden, weight, tp_size), targets, temperature, self.top_k, self.top_p)
