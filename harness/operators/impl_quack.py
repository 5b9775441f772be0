"""The third peer: QuACK's linear cross-entropy (``quack-kernels``, Tri Dao's CuTe-DSL kernels for Hopper).

As its users run it: ``quack.linear_cross_entropy.chunked_linear_cross_entropy(x, weight, target,
chunk_size=4096, reduction=...)``, which on an SM90 card with bf16 operands and V divisible by 128 takes its
"scaled-exp" pipeline: per chunk of 4096 rows one GEMM writes the chunk's exp-scaled logits in bf16 ([4096, V])
beside per-tile maxima, a glue kernel forms the loss, and two GEMMs with an operand transform give dx and an
fp32 dw accumulated across chunks, all inside the forward; the backward only scales them by the loss's
gradient. Under no_grad it takes a loss-only GEMM epilogue instead (``_scaled_exp_lce_loss_only``, what the
public function calls there). This adapter calls those two entry points so that it returns the per-row
loss, negated, which the public function only returns summed.

Its gradients exist only for a scalar loss (reduction 'sum' or 'mean'): a per-token ``grad_out`` must be
the same for every token (checked, one device sync in the backward; anything else raises OperandError),
so the bench's gradient figures for it are taken at a uniform grad_out (``scalar_loss_only``). No TP mode.
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, OperandError, Operator
from harness.operators.registry import register

CHUNK_SIZE = 4096  # chunked_linear_cross_entropy's default


class _QuackScaledExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets):
        rows = hidden.shape[0]
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        outs = torch.ops.quack.lce_scaled_exp_fwd(hidden.contiguous(), weight.contiguous(), targets, CHUNK_SIZE, -100, need_dx, need_dw, None, None)
        ctx.rows, ctx.weight_dtype = rows, weight.dtype
        dx = outs[1] if need_dx else None
        dw = outs[1 + need_dx] if need_dw else None
        ctx.save_for_backward(dx, dw)
        return -outs[0][:rows]

    @staticmethod
    def backward(ctx, grad_logp):
        dx, dw = ctx.saved_tensors
        scale = grad_logp[:1]
        if not torch.equal(grad_logp, scale.expand_as(grad_logp)):
            raise OperandError("quack-linear-ce: QuACK's fused gradients exist for a scalar loss only; grad_out must be the same for every token")
        factor = -scale.float()  # logp = -loss
        gx = (dx[: ctx.rows].float() * factor).to(dx.dtype) if dx is not None else None
        gw = (dw * factor).to(ctx.weight_dtype) if dw is not None else None
        return gx, gw, None


@register("quack-linear-ce")
class QuackLinearCE(Operator):
    contract = Contract(
        summary="QuACK chunked_linear_cross_entropy's SM90 scaled-exp pipeline (chunk 4096), per-row loss negated; loss-only epilogue under no_grad",
        operand_dtype="bfloat16",
        accumulate_dtype="float32 (CuTe DSL wgmma GEMMs)",
        logits_dtype="bf16 exp-scaled logits per 4096-row chunk (training); none stored (loss-only)",
        rounds_at=[
            "exp-scaled logits stored in bf16 per tile (training path)",
            "dx in bf16, dw accumulated in fp32 across chunks then rounded to the weight's dtype",
        ],
        reduction_order="per-tile maxima and sums of each 4096-row chunk (tile_N 128 at V=151936), combined by a glue kernel; dw over chunks in order",
        tp_handling="none (single device)",
        batch_invariant_by_design=False,
        tp_invariant_by_design=False,
        has_backward=True,
        requires=["cuda", "quack"],
    )
    scalar_loss_only = True  # its gradients take a uniform grad_out (see the module docstring)

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        if torch.cuda.get_device_capability() != (9, 0):
            return False, "QuACK's scaled-exp pipeline is SM90-only"
        try:
            import quack.linear_cross_entropy  # noqa: F401
        except Exception as exc:  # its CuTe DSL import can fail on a version mismatch: say what failed
            return False, f"import quack.linear_cross_entropy failed: {type(exc).__name__}: {str(exc)[:400]}"
        return True, ""

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        if tp_size != 1:
            raise OperandError("quack-linear-ce has no vocab-parallel mode; call it with tp_size=1")
        import quack.linear_cross_entropy as lce

        h = hidden if temperature == 1.0 else (hidden / temperature).to(hidden.dtype)
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            return _QuackScaledExp.apply(h, weight, targets)
        return -lce._scaled_exp_lce_loss_only(h.contiguous(), weight.contiguous(), targets, -100).float()
