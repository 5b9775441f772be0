"""The float64 reference: the exact function every other operator is measured against.

Operands are taken as they are (bf16 values upcast exactly to fp64), the GEMM, the temperature and
the log-softmax all run in fp64. Rows are processed in chunks so the T x V fp64 logits never exist
at once (1024 rows x 151936 x 8 bytes = 1.2 GiB at the production shape).
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator
from harness.operators.registry import register
from harness.operators.sampling_filters import DEFAULT_TOP_K, DEFAULT_TOP_P, apply_top_k_top_p

ROW_CHUNK = 1024


def reference_logprobs(hidden, weight, targets, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    """fp64 selected log-probs [T] (float64); -inf where a filter removed the target."""
    w64 = weight.to(torch.float64)
    out = torch.empty(hidden.shape[0], dtype=torch.float64, device=hidden.device)
    for r0 in range(0, hidden.shape[0], ROW_CHUNK):
        logits = hidden[r0 : r0 + ROW_CHUNK].to(torch.float64) @ w64.T
        logits /= temperature
        if top_k is not None or top_p is not None:
            logits, _ = apply_top_k_top_p(logits, top_k, top_p)
        logp = torch.log_softmax(logits, dim=-1)
        out[r0 : r0 + ROW_CHUNK] = logp.gather(1, targets[r0 : r0 + ROW_CHUNK, None]).squeeze(1)
        del logits, logp
    return out


_CONTRACT = dict(
    operand_dtype="as given (bf16), upcast exactly to float64",
    accumulate_dtype="float64",
    logits_dtype="float64",
    rounds_at=["none before the fp64 GEMM; fp64 rounding throughout"],
    reduction_order="torch fp64 log_softmax over the full row",
    tp_handling="ignored: always the unsplit vocabulary (it is the reference)",
    batch_invariant_by_design=False,
    tp_invariant_by_design=True,
    has_backward=False,  # it is the reference; backward parity is measured against fp64 autograd
)


@register("fp64-reference")
class Fp64Reference(Operator):
    contract = Contract(summary="float64 GEMM and log-softmax on the given operands", **_CONTRACT)

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        return reference_logprobs(hidden, weight, targets, temperature).float()


@register("fp64-reference-processed")
class Fp64ReferenceProcessed(Operator):
    top_k = DEFAULT_TOP_K
    top_p = DEFAULT_TOP_P
    contract = Contract(
        summary=f"float64 reference of vLLM's processed log-probs (top_k={DEFAULT_TOP_K}, top_p={DEFAULT_TOP_P})",
        semantics="processed",
        **_CONTRACT,
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        return reference_logprobs(hidden, weight, targets, temperature, self.top_k, self.top_p).float()
