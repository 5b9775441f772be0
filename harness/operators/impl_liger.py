"""The peer: Liger-Kernel's fused linear cross-entropy (pure Triton), measured beside ours.

With ``reduction='none'`` it returns the per-token loss, i.e. minus the selected log-prob. It keeps
the logits of each chunk in the operand dtype (bf16) before its fp32 softmax, and sizes its row
chunks from the token count, so neither batch nor TP invariance is part of its design. It has no TP
mode: ``tp_size`` > 1 is refused, since emulating one would measure our emulation, not Liger.
"""

from __future__ import annotations

from harness.operators.contract import Contract, OperandError, Operator
from harness.operators.registry import register


@register("liger-fused-linear-ce")
class LigerFusedLinearCE(Operator):
    contract = Contract(
        summary="Liger-Kernel fused linear cross-entropy, reduction='none', negated",
        operand_dtype="bfloat16",
        accumulate_dtype="float32 (cuBLAS chunk GEMM), chunk logits in bf16",
        logits_dtype="bfloat16 per row chunk",
        rounds_at=["chunk logits to bf16 at the GEMM output", "fp32 online softmax in Triton"],
        reduction_order="Triton online softmax per row over vocab blocks; row chunk size depends on T",
        tp_handling="none (single device)",
        batch_invariant_by_design=False,
        tp_invariant_by_design=False,
        has_backward=True,
        requires=["cuda", "triton", "liger_kernel"],
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        if tp_size != 1:
            raise OperandError("liger-fused-linear-ce has no vocab-parallel mode; call it with tp_size=1")
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        h = hidden if temperature == 1.0 else (hidden / temperature).to(hidden.dtype)
        # Liger computes its gradients during the forward whenever an input requires grad
        loss = liger_fused_linear_cross_entropy(h, weight, targets, reduction="none")
        return (-loss).float()
