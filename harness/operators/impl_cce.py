"""The second peer: Cut Cross-Entropy (Apple's ``cut-cross-entropy``, pure Triton), beside Liger.

``linear_cross_entropy(e, c, targets, reduction='none')`` returns the per-token loss, i.e. minus the
selected log-prob, with its default gradient filtering (``filter_eps='high'``: softmax entries
below the operand dtype's resolution are skipped in the backward). Its log-sum-exp is a Triton
kernel over (row, vocab) blocks combined with atomics, so neither batch nor TP invariance is part of
its design; it has no TP mode (``tp_size`` > 1 is refused, as for Liger).
"""

from __future__ import annotations

from harness.operators.contract import Contract, OperandError, Operator
from harness.operators.registry import register


@register("cut-cross-entropy")
class CutCrossEntropy(Operator):
    contract = Contract(
        summary="Cut Cross-Entropy linear_cross_entropy, reduction='none', negated (defaults: filter_eps='high')",
        operand_dtype="bfloat16",
        accumulate_dtype="float32 (Triton tl.dot per block)",
        logits_dtype="none stored: blocks in registers",
        rounds_at=["blockwise log-sum-exp combined across vocab blocks", "backward skips softmax entries below filter_eps"],
        reduction_order="vocab blocks of the log-sum-exp combined by atomics (order not fixed)",
        tp_handling="none (single device)",
        batch_invariant_by_design=False,
        tp_invariant_by_design=False,
        has_backward=True,
        requires=["cuda", "triton", "cut_cross_entropy"],
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        if tp_size != 1:
            raise OperandError("cut-cross-entropy has no vocab-parallel mode; call it with tp_size=1")
        from cut_cross_entropy import linear_cross_entropy

        h = hidden if temperature == 1.0 else hidden / temperature
        return -linear_cross_entropy(h, weight, targets, reduction="none").float()


@register("cut-cross-entropy-exact")
class CutCrossEntropyExact(CutCrossEntropy):
    """The same kernels with the gradient filter off (``filter_eps=None``): every softmax entry enters the
    backward, so its cost no longer depends on how peaked the softmax is (regimes.py)."""

    contract = CutCrossEntropy.contract.model_copy(
        update={
            "summary": "Cut Cross-Entropy linear_cross_entropy, reduction='none', negated, filter_eps=None (exact backward)",
            "rounds_at": ["blockwise log-sum-exp combined across vocab blocks", "backward over every softmax entry (no filter)"],
        }
    )
    filter_eps = None

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        if tp_size != 1:
            raise OperandError("cut-cross-entropy-exact has no vocab-parallel mode; call it with tp_size=1")
        from cut_cross_entropy import linear_cross_entropy

        h = hidden if temperature == 1.0 else hidden / temperature
        return -linear_cross_entropy(h, weight, targets, reduction="none", filter_eps=None).float()
