"""The fused linear-logprob operator: online log-sum-exp over vocab tiles, fp32, batch/TP invariant.

Forward: per-chunk partials from the Triton kernel (CUDA) or the torch version (elsewhere), merged
in the fixed chunk order (fused_plan.py). Backward (for training): recompute each vocab slice's fp32
logits from the saved operands and the saved log-sum-exp, form (onehot - softmax) * grad / T, and
accumulate grad_hidden and grad_weight slice by slice, so no T x V tensor exists in backward either.
The backward is deterministic run to run; it is not claimed batch-invariant (it uses library GEMMs).
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator
from harness.operators.fused_plan import merge_partials, shard_chunk_bounds
from harness.operators.fused_torch import torch_partials
from harness.operators.registry import register

BACKWARD_SLICE = 8192  # vocab columns per backward step: T x 8192 fp32 (256 MiB at T = 8192)


def _partials_fn(device: torch.device, dtype: torch.dtype = torch.bfloat16):
    # The Triton kernel takes 16-bit operands; an fp32 tl.dot would silently use TF32, so fp32
    # operands take the torch path (exact fp32 GEMMs of fixed shape) on any device.
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        from harness.operators.fused_triton import triton_partials

        return triton_partials
    return torch_partials


def fused_forward(hidden, weight, targets, temperature, tp_size, partials_fn=None):
    """(selected log-probs [T] fp32, log-sum-exp [T] fp32); tp_size shards emulated in rank order."""
    partials_fn = partials_fn or _partials_fn(hidden.device, hidden.dtype)
    vocab = weight.shape[0]
    gathered = []
    for rank in range(tp_size):
        start, local = shard_chunk_bounds(vocab, tp_size, rank)
        shard = weight[start : start + vocab // tp_size]
        gathered.append(partials_fn(hidden, shard, targets - start, local, temperature))
    # all-gather of partials: concatenate every rank's chunks in rank (= chunk) order
    m, s, z_t = (torch.cat([g[i] for g in gathered], dim=0) for i in range(3))
    return merge_partials(m, s, z_t)


def _slice_logits(hidden, w_slice):
    if hidden.is_cuda:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 logits from bf16 operands, as in forward
        try:
            return hidden.float() @ w_slice.float().T
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return hidden.float() @ w_slice.float().T


def fused_backward(hidden, weight, targets, lse, temperature, grad_out):
    """(grad_hidden, grad_weight) of sum(grad_out * selected_logprobs), in the operands' dtype."""
    grad_dtype = hidden.dtype if hidden.is_cuda else torch.float32  # bf16 GEMMs on GPU, as Megatron
    grad_h = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    grad_w = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    h_g = hidden.to(grad_dtype)
    g = grad_out.float()
    for v0 in range(0, weight.shape[0], BACKWARD_SLICE):
        w_slice = weight[v0 : v0 + BACKWARD_SLICE]
        z = _slice_logits(hidden, w_slice) / temperature
        grad_z = -torch.exp(z - lse[:, None]) * g[:, None]  # d logp_t / d z_v = onehot - softmax
        local = targets - v0
        hit = (local >= 0) & (local < w_slice.shape[0])
        rows = torch.nonzero(hit).squeeze(1)
        grad_z[rows, local[rows]] += g[rows]
        grad_logits = (grad_z / temperature).to(grad_dtype)
        grad_h += (grad_logits @ w_slice.to(grad_dtype)).float()
        grad_w[v0 : v0 + BACKWARD_SLICE] = (grad_logits.T @ h_g).to(weight.dtype)
        del z, grad_z, grad_logits
    return grad_h.to(hidden.dtype), grad_w


def _path_name(device: torch.device, dtype: torch.dtype) -> str:
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        from harness.operators.fused_torch import BLOCK_T, BLOCK_V

        return f"torch tiles {BLOCK_T}x{BLOCK_V}"
    from harness.operators.fused_triton import default_config

    c = default_config(device)
    return f"triton {c.variant} {c.block_t}x{c.block_v}x{c.block_k} w{c.num_warps} s{c.num_stages}"


class FusedLinearLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, tp_size):
        logp, lse = fused_forward(hidden, weight, targets, temperature, tp_size)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature = temperature
        return logp

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_h, grad_w = fused_backward(hidden, weight, targets, lse, ctx.temperature, grad_out)
        return grad_h, grad_w, None, None, None


@register("fused-linear-logprob")
class FusedLinearLogprobOperator(Operator):
    contract = Contract(
        summary="Fused linear-logprob: tiled GEMM + online log-sum-exp, fp32, fixed 8-chunk reduction plan",
        operand_dtype="as given (bf16 in production)",
        accumulate_dtype="float32",
        logits_dtype="none stored: fp32 tiles in registers (Triton) or one fp32 tile (torch)",
        rounds_at=["fp32 GEMM accumulation per tile", "fp32 / T (as x * (1/T))", "fp32 online max/exp/sum", "fp32 merge of 8 chunk partials"],
        reduction_order=(
            "vocabulary cut into 8 chunks at (c*V)//8; tiles from each chunk's start in fixed order; "
            "chunks merged in chunk order by one elementwise sequence"
        ),
        tp_handling="TP 1/2/4/8: each rank computes its chunks' partials; all-gather of partials, same merge",
        batch_invariant_by_design=True,
        tp_invariant_by_design=True,
        has_backward=True,
        requires=[],
    )

    last_path = ""

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        self.last_path = _path_name(hidden.device, hidden.dtype)
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            return FusedLinearLogprob.apply(hidden, weight, targets, temperature, tp_size)
        return fused_forward(hidden, weight, targets, temperature, tp_size)[0]
