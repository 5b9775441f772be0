"""Numerical controls: faults injected at one named operator boundary of one engine
(``--embedded-inject rollout-lse-bf16`` / ``trainer-softmax-bf16`` / ``trainer-tp-reduce-bf16``,
parsed in injections.py).

The boundary table (harness/attribution/boundaries.py) must localise each to its boundary and class
it candidate-operator, while the framework and semantic probes pass:
- ``rollout-lse-bf16``: vLLM's sampler log-probs take their log-sum-exp with the running sum held in
  bf16 (partial sums rounded every ``ACC_CHUNK`` vocabulary entries) instead of fp32. Boundary:
  logsumexp, rollout side. It needs vLLM's sampler in this process (colocate, TP=1).
- ``trainer-softmax-bf16``: Megatron's attention softmax (FusedScaleMaskSoftmax's torch path)
  computes in bf16 and casts back. Boundary: layer.0.attention, trainer side.
- ``trainer-tp-reduce-bf16``: Megatron's MLP output projection (linear_fc2, a RowParallelLinear, every
  layer) as a tensor-parallel layer computes it over ``TP_RANKS`` ranks - each rank's partial GEMM over
  its slice of the input features - and its all-reduce sums the partials in another order (last rank
  first) in bf16, as an all-reduce of bf16 partials does. Boundary: layer.0.mlp, trainer side. The
  order alone, with partials kept at the declared precision, is inside the envelope (measured 0.5x on
  an fp32-floor capture, docs/attribution.md): a reordered reduction is a fault only where its
  partials leave the declared precision.
"""

from __future__ import annotations

import torch

ACC_CHUNK = 32  # vocabulary entries summed in fp32 before the running sum is rounded to bf16
TP_RANKS = 4  # emulated tensor-parallel ranks of the reordered row-parallel reduction
TP_REDUCE_MARK = "_embedded_tp_reduce_bf16"  # set on the linear_fc2 modules the control acts on


def logsumexp_bf16_accumulated(x: torch.Tensor) -> torch.Tensor:
    """log-sum-exp over the last dim with the running sum of exps held in bf16 (max-shifted)."""
    m = x.max(dim=-1, keepdim=True).values
    exps = torch.exp(x - m)
    total = torch.zeros(x.shape[:-1], dtype=torch.bfloat16)
    for chunk in exps.split(ACC_CHUNK, dim=-1):
        total = (total.float() + chunk.float().sum(-1)).to(torch.bfloat16)
    return m.squeeze(-1) + torch.log(total.float())


def row_parallel_reordered(x: torch.Tensor, weight: torch.Tensor, partial_dtype: torch.dtype, ranks: int = TP_RANKS) -> torch.Tensor:
    """x @ weight.T as ``ranks`` row-parallel ranks compute it: rank r's GEMM over its slice of the
    input features, its partial rounded to ``partial_dtype``, the partials summed last rank first
    (each sum in ``partial_dtype``), cast back to x's dtype. Differentiable."""
    partials = [torch.nn.functional.linear(xr, wr).to(partial_dtype) for xr, wr in zip(x.chunk(ranks, -1), weight.chunk(ranks, -1))]
    total = partials[-1]
    for partial in reversed(partials[:-1]):
        total = total + partial
    return total.to(x.dtype)


def _install_trainer_tp_reduce_bf16() -> None:
    from megatron.core.tensor_parallel.layers import RowParallelLinear
    from megatron.core.transformer.mlp import MLP

    if getattr(RowParallelLinear._forward_impl, "_tp_reduce_bf16", False):
        return
    original_init, original_forward = MLP.__init__, RowParallelLinear._forward_impl

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        setattr(self.linear_fc2, TP_REDUCE_MARK, True)  # the MLP's output projection only, not attention's

    def forward_impl(self, input, weight, *args, **kwargs):
        if getattr(self, TP_REDUCE_MARK, False):
            return row_parallel_reordered(input, weight, torch.bfloat16)
        return original_forward(self, input, weight, *args, **kwargs)

    forward_impl._tp_reduce_bf16 = True
    MLP.__init__ = init
    RowParallelLinear._forward_impl = forward_impl


def _install_rollout_lse_bf16() -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    for name in ("forward_cpu", "forward_native"):
        original = getattr(TopKTopPSampler, name)
        if getattr(original, "_lse_bf16", False):
            continue

        def forward(self, logits, generators, k, p, _original=original):
            sampled, logprobs = _original(self, logits, generators, k, p)
            if logprobs is not None and self.logprobs_mode == "processed_logprobs":
                # logprobs = x - lse(x) exactly in fp32, so lse_bf16(logprobs) = lse_bf16(x) - lse(x):
                # subtracting it gives x - lse_bf16(x), the injected operator, on the same x.
                logprobs = logprobs - logsumexp_bf16_accumulated(logprobs).unsqueeze(-1)
            return sampled, logprobs

        forward._lse_bf16 = True
        setattr(TopKTopPSampler, name, forward)


def _install_trainer_softmax_bf16() -> None:
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax, get_default_causal_mask
    from megatron.core.transformer.enums import AttnMaskType

    if getattr(FusedScaleMaskSoftmax.forward_torch_softmax, "_bf16", False):
        return

    def forward_torch_softmax(self, input, mask, softmax_offset=None):
        out_dtype = torch.bfloat16 if self.input_in_float16 else input.dtype
        x = input.float() * self.scale if self.scale is not None else input.float()
        sq = x.size(2)
        if mask is None and self.attn_mask_type == AttnMaskType.causal and sq > 1:
            mask = get_default_causal_mask(sq)
        masked = self.mask_func(x, mask) if mask is not None else x
        return torch.softmax(masked.to(torch.bfloat16), dim=-1).to(out_dtype)

    forward_torch_softmax._bf16 = True
    FusedScaleMaskSoftmax.forward_torch_softmax = forward_torch_softmax


def install(faults, *, engine_in_process: bool) -> list[str]:
    """Install the numerical controls the faults ask for; returns one line per problem (empty: fine)."""
    problems = []
    if faults.rollout_lse_bf16:
        if not engine_in_process:
            problems.append("--embedded-inject rollout-lse-bf16: needs vLLM's sampler in the trainer's process (--colocate, TP=1)")
        else:
            _install_rollout_lse_bf16()
    if faults.trainer_softmax_bf16:
        _install_trainer_softmax_bf16()
    if faults.trainer_tp_reduce_bf16:
        _install_trainer_tp_reduce_bf16()
    return problems
