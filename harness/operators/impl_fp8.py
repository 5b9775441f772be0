"""FP8 (e4m3) LM head: per-tensor scales, and DeepSeek-style 128x128 weight / 1x128 activation blocks.

On a GPU with FP8 tensor cores the GEMM is ``torch._scaled_mm`` (real FP8 operands, fp32
accumulation, bf16 output). Elsewhere, and for block scales when this torch/cuBLAS refuses them, it
is fake-quant: the same e4m3 rounding and scales, dequantised and multiplied in fp32, output rounded
to bf16. ``last_path`` tells the bench which ran. After the GEMM both follow vLLM: fp32 / T,
fp32 log-softmax, gather.
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator
from harness.operators.impl_vllm import vllm_selected
from harness.operators.registry import register

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BLOCK = 128
ROW_CHUNK = 1024


def quantize_per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def quantize_blocks(x: torch.Tensor, rows_per_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales per (rows_per_block x 128) block: 1 for activation groups, 128 for weight blocks."""
    r, c = x.shape
    if r % rows_per_block or c % BLOCK:
        raise ValueError(f"block FP8 needs rows divisible by {rows_per_block} and columns by {BLOCK}; got {r}x{c}")
    xb = x.float().reshape(r // rows_per_block, rows_per_block, c // BLOCK, BLOCK)
    scale = (xb.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=1e-12)  # [r/rb, c/128]
    q = (xb / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.reshape(r, c), scale


def dequantize_blocks(q: torch.Tensor, scale: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    r, c = q.shape
    qb = q.float().reshape(r // rows_per_block, rows_per_block, c // BLOCK, BLOCK)
    return (qb * scale[:, None, :, None]).reshape(r, c)


def _fake_quant_gemm(h_deq: torch.Tensor, w_deq: torch.Tensor) -> torch.Tensor:
    """fp32 GEMM of dequantised operands, output rounded to bf16 like the FP8 GEMM's output."""
    out = torch.empty(h_deq.shape[0], w_deq.shape[0], dtype=torch.bfloat16, device=h_deq.device)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # products of e4m3 values are exact in fp32
    try:
        for r0 in range(0, h_deq.shape[0], ROW_CHUNK):
            out[r0 : r0 + ROW_CHUNK] = (h_deq[r0 : r0 + ROW_CHUNK] @ w_deq.T).to(torch.bfloat16)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return out


def _use_scaled_mm(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.get_device_capability(t.device) >= (8, 9)


_CONTRACT = dict(
    accumulate_dtype="float32",
    logits_dtype="bfloat16, upcast to float32",
    reduction_order="torch log_softmax over the full row (vLLM path)",
    tp_handling="as vLLM: shards all-gathered before the softmax",
    batch_invariant_by_design=False,
    tp_invariant_by_design=True,
)


@register("fp8-per-tensor")
class Fp8PerTensor(Operator):
    contract = Contract(
        summary="FP8 e4m3 GEMM, one scale per tensor (torch._scaled_mm on GPU), then vLLM's fp32 log-softmax",
        operand_dtype="float8_e4m3fn, per-tensor fp32 scales",
        rounds_at=["operands to e4m3", "GEMM output to bf16", "fp32 / T", "fp32 log-softmax"],
        **_CONTRACT,
    )
    last_path = ""

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        hq, hs = quantize_per_tensor(hidden)
        wq, ws = quantize_per_tensor(weight)
        if _use_scaled_mm(hidden):
            self.last_path = "torch._scaled_mm per-tensor"
            logits = torch._scaled_mm(hq, wq.T, scale_a=hs, scale_b=ws, out_dtype=torch.bfloat16)
        else:
            self.last_path = "fake-quant (e4m3 round trip, fp32 GEMM)"
            logits = _fake_quant_gemm(hq.float() * hs, wq.float() * ws)
        return vllm_selected(logits, targets, temperature)


@register("fp8-block")
class Fp8Block(Operator):
    contract = Contract(
        summary="FP8 e4m3, DeepSeek-style scales: 128x128 weight blocks, 1x128 activation groups",
        operand_dtype="float8_e4m3fn, fp32 scales per 1x128 (hidden) and 128x128 (weight) block",
        rounds_at=["operands to e4m3 per block", "GEMM output to bf16", "fp32 / T", "fp32 log-softmax"],
        **_CONTRACT,
    )
    last_path = ""

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        hq, hs = quantize_blocks(hidden, 1)
        wq, ws = quantize_blocks(weight, BLOCK)
        logits = _scaled_mm_blockwise(hq, hs, wq, ws) if _use_scaled_mm(hidden) else None
        if logits is None:
            self.last_path = "fake-quant (e4m3 round trip per block, fp32 GEMM)"
            logits = _fake_quant_gemm(dequantize_blocks(hq, hs, 1), dequantize_blocks(wq, ws, BLOCK))
        else:
            self.last_path = "torch._scaled_mm blockwise 1x128 x 128x128"
        return vllm_selected(logits, targets, temperature)


def _scaled_mm_blockwise(hq, hs, wq, ws):
    """Real block-scaled FP8 GEMM where this torch/cuBLAS takes it; None where it refuses."""
    # torch wants scale_a (T, H/128) and scale_b (H/128, V/128); cuBLAS wants them outer-dim-major.
    # Layout rules have moved between torch versions, so try the known ones.
    a_scales = [hs.t().contiguous().t(), hs.contiguous()]
    b_scales = [ws.t(), ws.t().contiguous()]
    for sa in a_scales:
        for sb in b_scales:
            try:
                return torch._scaled_mm(hq, wq.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            except (RuntimeError, ValueError):
                continue
    return None
