"""The linear boundary's operators: the candidate both engines run, each engine's native, the reference.

- ``fp8-block-linear`` (the candidate): every product of x and the held weight formed in fp32 (exact
  for bf16 operands: 8 x 8 significand bits fit fp32's 24), added into an fp32 running sum one k at a
  time, k ascending, then rounded once to x's dtype. Each output element is its own sequence of
  IEEE operations whose order depends on K alone, so a row's result cannot depend on the rows beside
  it, the batch's size or the call's tiling (batch invariant by construction, and measured).
- ``megatron-native-linear`` / ``vllm-native-linear``: what each engine runs without the candidate
  (torch's GEMM on the trainer, vLLM's CPU GEMM dispatch: oneDNN or its small-GEMM kernel), as the
  bench's peers. On an FP8 rollout the trainer's native reads its own unquantised weight: the bench
  passes each native the weight that engine holds.
- ``fp64-linear-reference``: the same products summed in fp64, rounded once: the bench's truth.
"""

from __future__ import annotations

import torch

from harness.operators.linear_contract import LinearContract, LinearOperator
from harness.operators.registry import register

ROW_CHUNK = 4096  # rows per pass: bounds the fp32 running sum's memory, never the arithmetic (rows are independent)


def ordered_sum_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """fp32 x @ weight.T with each output's sum over K formed k = 0, 1, ..., K-1, one product and one
    add each (no fused multiply-add: its single rounding is what a vector body and a scalar tail
    could disagree on for fp32 operands)."""
    xf = x.float()
    columns = weight.float().t().contiguous()  # columns[k] = weight[:, k], read contiguously
    out = torch.empty(xf.shape[0], columns.shape[1], dtype=torch.float32)
    for start in range(0, xf.shape[0], ROW_CHUNK):
        rows = xf[start : start + ROW_CHUNK]
        total = torch.zeros(rows.shape[0], columns.shape[1], dtype=torch.float32)
        for k in range(xf.shape[1]):
            total.add_(rows[:, k : k + 1] * columns[k])
        out[start : start + ROW_CHUNK] = total
    return out


@register("fp8-block-linear")
class Fp8BlockLinear(LinearOperator):
    contract = LinearContract(
        summary="FP8 weight linear with a fixed-order fp32 sum over K: the candidate both engines run at the fp8-weights boundary",
        weight_form=(
            "the rollout's weight: on an FP8 rollout e4m3 in 128x128 blocks (one fp32 scale a block, per HF tensor) "
            "dequantised to the model dtype, as the engine holds it; the trainer's own weight put into that form"
        ),
        operand_dtype="the model dtype (bf16): products exact in fp32",
        accumulate_dtype="float32",
        rounds_at=["each k's fp32 add into the running sum", "the output, once, to x's dtype"],
        reduction_order="k ascending, one add per k, for every output element alike (no split-K, no tiling over K)",
        batch_invariant_by_design=True,
        gpu_form=(
            "an FP8 block-scaled GEMM (e4m3 weights with 128x128 block scales; Blackwell tcgen05 UMMA with fp32 "
            "accumulation, e.g. a CUTLASS SM100 blockwise-scaled or DeepGEMM fp8 GEMM) launched with one fixed tile "
            "shape and no split-K whatever the token count, called by vLLM's Fp8LinearMethod and by the trainer's "
            "forward on its weights quantised the same way (straight-through backward)"
        ),
    )

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return ordered_sum_linear(x, weight).to(x.dtype)


@register("megatron-native-linear")
class MegatronNativeLinear(LinearOperator):
    contract = LinearContract(
        summary="the trainer's native linear: torch's GEMM (F.linear) in the model dtype",
        weight_form="the trainer's own weight (unquantised on an FP8 rollout)",
        operand_dtype="the model dtype",
        accumulate_dtype="float32 inside the GEMM library",
        rounds_at=["the GEMM library's partial sums (its own blocking)", "the output to the model dtype"],
        reduction_order="the GEMM library's (oneDNN or MKL blocking; may change with the row count)",
        batch_invariant_by_design=False,
        gpu_form="cuBLASLt / TransformerEngine GEMM of the trainer's bf16 weights",
    )

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, weight.to(x.dtype))


@register("vllm-native-linear")
class VllmNativeLinear(LinearOperator):
    contract = LinearContract(
        summary="the rollout engine's native linear: vLLM's CPU unquantised GEMM dispatch on the held weight",
        weight_form="the weight the engine holds (FP8 blocks dequantised on an FP8 rollout)",
        operand_dtype="the model dtype",
        accumulate_dtype="float32 inside oneDNN / the small-GEMM kernel",
        rounds_at=["the kernel's partial sums", "the output to the model dtype"],
        reduction_order="oneDNN's (or vLLM's small-GEMM kernel's) blocking for this weight's shape",
        batch_invariant_by_design=False,
        gpu_form="vLLM's Fp8LinearMethod (CUTLASS / DeepGEMM block-scaled FP8 GEMM, tile and split chosen per token count)",
        requires=["vllm"],
    )

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(weight.detach().contiguous(), requires_grad=False)
        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)  # the kernel vLLM's layer of this shape runs
        return layer.cpu_linear(x.to(weight.dtype).contiguous(), layer.weight, None)


@register("fp64-linear-reference")
class Fp64LinearReference(LinearOperator):
    contract = LinearContract(
        summary="fp64 reference: exact products summed in fp64, rounded once",
        weight_form="as given",
        operand_dtype="float64",
        accumulate_dtype="float64",
        rounds_at=["the output, once, to x's dtype"],
        reduction_order="torch's fp64 GEMM (its order is below every rounding that matters here)",
        batch_invariant_by_design=False,
        gpu_form="none (a reference)",
    )

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (x.double() @ weight.double().T).to(x.dtype)
