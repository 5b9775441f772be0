"""The selected log-prob from given logits (the sampler's boundary), forward and backward, batch invariant.

    logp, lse = logits_logprob(logits, targets, temperature)            # [T] fp32 each
    grad = logits_logprob_backward(logits, targets, lse, grad_out, temperature)  # [T, V], logits' dtype

vLLM's sampler holds the logits ([T, V], fp32 after its cast, or the model's bf16) and takes the log-softmax
of every row to gather one entry: a [T, V] fp32 tensor written and read for T numbers. These kernels read
each logit once (forward) or read it and write its gradient once (backward), which is the least a
selected log-prob can move; :func:`floor_bytes` counts those bytes.

Forward (Triton): one program per row, the row in blocks of BLOCK columns from column 0; each lane keeps
its own running max and sum (the update needs one exp2: ``d = x - m; s = d > 0 ? s * 2^-d + 1 : s + 2^d``),
and the lanes are folded once at the end, in a fixed tree. Nothing depends on T or on the other rows, so
a row's bits are the same in any batch. Backward: ``(onehot - exp(z/T - lse)) * grad_out / T`` per
element, the target's entry from the fp32 difference. The torch version (CPU) computes the same values
row by row in fp32 (not the same bits as the GPU's).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FWD_BLOCK = 4096
FWD_WARPS = 8
BWD_BLOCK = 4096
BWD_WARPS = 8


@triton.jit(do_not_specialize=["T", "V", "stride"])
def _logits_fwd_kernel(z_ptr, tgt_ptr, logp_ptr, lse_ptr, T, V, stride, inv_temp, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = z_ptr + row.to(tl.int64) * stride
    scale2 = inv_temp * 1.4426950408889634
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for v0 in range(0, V, BLOCK):
        ok = v0 + cols < V
        x = tl.load(base + v0 + cols, mask=ok, other=float("-inf")).to(tl.float32) * scale2
        d = x - m
        e = tl.exp2(-tl.abs(d))  # one of the two factors is 2^0: only the other is computed
        s_new = tl.where(d > 0, s * e + 1.0, s + e)
        s = tl.where(ok & (x > float("-inf")), s_new, s)  # -inf - -inf is NaN: a -inf logit adds nothing
        m = tl.maximum(m, x)
    big = tl.max(m, axis=0)
    total = tl.sum(tl.where(m > float("-inf"), s * tl.exp2(m - big), 0.0), axis=0)
    lse = (big + tl.log2(total)) * 0.6931471805599453
    tgt = tl.load(tgt_ptr + row)
    z_t = tl.load(base + tgt).to(tl.float32) * inv_temp
    tl.store(logp_ptr + row, z_t - lse)
    tl.store(lse_ptr + row, lse)


@triton.jit(do_not_specialize=["T", "V", "stride_z", "stride_g"])
def _logits_bwd_kernel(z_ptr, tgt_ptr, lse_ptr, gout_ptr, g_ptr, T, V, stride_z, stride_g, inv_temp, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < V
    x = tl.load(z_ptr + row.to(tl.int64) * stride_z + cols, mask=ok, other=0.0).to(tl.float32)
    lse2 = tl.load(lse_ptr + row) * 1.4426950408889634
    g = tl.load(gout_ptr + row).to(tl.float32) * inv_temp
    p = tl.exp2(x * (inv_temp * 1.4426950408889634) - lse2)
    tgt = tl.load(tgt_ptr + row)
    grad = tl.where(cols == tgt, (1.0 - p) * g, -p * g)
    tl.store(g_ptr + row.to(tl.int64) * stride_g + cols, grad.to(g_ptr.dtype.element_ty), mask=ok)


def _on_triton(logits: torch.Tensor, triton_path: bool | None) -> bool:
    return logits.is_cuda if triton_path is None else triton_path


def logits_logprob(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, triton_path: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(selected log-prob [T] fp32, log-sum-exp [T] fp32) of ``logits`` [T, V] (any float dtype) / temperature.
    ``triton_path``: the Triton kernels (default on a GPU; True on CPU runs them under Triton's interpreter)."""
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if not _on_triton(logits, triton_path):
        return _torch_forward(logits, targets, temperature)
    out = torch.empty(2, rows, dtype=torch.float32, device=logits.device)
    _logits_fwd_kernel[(rows,)](
        logits, targets.contiguous(), out[0], out[1], rows, vocab, logits.stride(0), 1.0 / temperature, BLOCK=FWD_BLOCK, num_warps=FWD_WARPS
    )
    return out[0], out[1]


def logits_logprob_backward(
    logits, targets, lse, grad_out, temperature: float = 1.0, grad_dtype=None, triton_path: bool | None = None
) -> torch.Tensor:
    """d(sum(grad_out * logp))/d(logits), [T, V] in ``grad_dtype`` (default the logits' dtype)."""
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if not _on_triton(logits, triton_path):
        return _torch_backward(logits, targets, lse, grad_out, temperature).to(grad_dtype or logits.dtype)
    grad = torch.empty(rows, vocab, dtype=grad_dtype or logits.dtype, device=logits.device)
    _logits_bwd_kernel[(rows, triton.cdiv(vocab, BWD_BLOCK))](
        logits,
        targets.contiguous(),
        lse.contiguous(),
        grad_out.contiguous(),
        grad,
        rows,
        vocab,
        logits.stride(0),
        grad.stride(0),
        1.0 / temperature,
        BLOCK=BWD_BLOCK,
        num_warps=BWD_WARPS,
    )
    return grad


def _torch_forward(logits, targets, temperature):
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    return z.gather(1, targets[:, None].long()).squeeze(1) - lse, lse


def _torch_backward(logits, targets, lse, grad_out, temperature):
    p = torch.exp(logits.float() / temperature - lse[:, None])
    onehot = torch.zeros_like(p).scatter_(1, targets[:, None].long(), 1.0)
    return (onehot - p) * (grad_out.float() / temperature)[:, None]


class LogitsLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, temperature):
        logp, lse = logits_logprob(logits, targets, temperature)
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        return logp

    @staticmethod
    def backward(ctx, grad_out):
        logits, targets, lse = ctx.saved_tensors
        return logits_logprob_backward(logits, targets, lse, grad_out, ctx.temperature), None, None


def selected_logprobs_from_logits(logits, targets, temperature: float = 1.0) -> torch.Tensor:
    """[T] fp32 selected log-probs, with autograd to the logits when they require grad."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return LogitsLogprob.apply(logits, targets, temperature)
    return logits_logprob(logits, targets, temperature)[0]


def floor_bytes(rows: int, vocab: int, itemsize: int, grad_itemsize: int | None = None) -> dict:
    """The fewest bytes each stage must move through device memory: forward reads every logit and writes two
    floats per row (reads one target each); backward reads every logit and writes every gradient."""
    grad_itemsize = grad_itemsize or itemsize
    fwd = rows * vocab * itemsize + rows * (8 + 8)
    bwd = rows * vocab * (itemsize + grad_itemsize) + rows * (8 + 4 + 4)
    return {"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}
