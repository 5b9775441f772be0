"""Numerical controls: faults injected at one named operator boundary of one engine
(``--embedded-inject rollout-lse-bits:N`` / ``trainer-softmax-bits:N`` / ``trainer-softmax-sum-bits:N`` /
``trainer-tp-reduce-bits:N`` / ``rollout-fp8-weight-scale:F``, parsed in injections.py; ``*-bf16`` is ``*-bits:7``).

The boundary table (harness/attribution/boundaries.py) must localise each to its boundary and class
it candidate-operator, while the framework and semantic probes pass. The rounding controls are sized:
values are rounded to N mantissa bits (fp32's 8-bit exponent kept, round to nearest even,
``round_mantissa``); N = 7 is bf16, bit for bit, so a control can be made smaller or larger than
bf16 to find the smallest size a boundary's envelope lets through (tools/control_sizes.py):
- ``rollout-lse-bits:N``: vLLM's sampler log-probs take their log-sum-exp with the running sum held
  at N bits (partial sums rounded every ``ACC_CHUNK`` vocabulary entries) instead of fp32. Boundary:
  logsumexp, rollout side. It needs vLLM's sampler in this process (colocate, TP=1).
- ``trainer-softmax-bits:N``: Megatron's attention softmax (FusedScaleMaskSoftmax's torch path)
  takes its scores rounded to N bits and rounds its probabilities to N bits (computed in bf16 for
  N <= 7, as torch's bf16 softmax computes, in fp32 above). Boundary: layer.0.attention, trainer side.
  On a bf16 trainer the scores and the probabilities are bf16 already, so at N = 7 it is the identity
  there (measured: the faulted and clean re-scores bitwise equal on near-aligned); it is a fault at
  bf16 size only on a wider trainer (the fp32 floor) or below 7 bits.
- ``trainer-softmax-sum-bits:N``: the same softmax with its denominator, the running sum of the row's
  exps, held at N bits (every partial sum rounded, as a kernel accumulating its row sum in bf16 does at
  N = 7); scores and probabilities otherwise at the softmax's own precision, so it is a fault at bf16
  size on a bf16 trainer: every row's probabilities scaled by one small error. Boundary:
  layer.0.attention, trainer side. One attention-softmax control at a time.
- ``trainer-tp-reduce-bits:N``: Megatron's MLP output projection (linear_fc2, a RowParallelLinear, every
  layer) as a tensor-parallel layer computes it over ``TP_RANKS`` ranks - each rank's partial GEMM over
  its slice of the input features - and its all-reduce sums the partials in another order (last rank
  first) at N bits, as an all-reduce of bf16 partials does at N = 7. Boundary: layer.0.mlp, trainer
  side. The order alone, with partials kept at the declared precision, is inside the envelope
  (measured 0.5x on an fp32-floor capture, docs/attribution.md): a reordered reduction is a fault
  only where its partials leave the declared precision.
- ``trainer-lm-head-bits:N``: Megatron's output layer (the LM-head GEMM) as ``TP_RANKS`` partial GEMMs
  over slices of the hidden dimension, each partial and each running sum at N bits (the tp-reduce
  control's arithmetic, at the LM head). Boundary: logits, trainer side.
- ``rollout-filter-bits:N``: vLLM's top-k/top-p filter kernel keeps its top-p running sum of the
  sorted probabilities at N bits (every partial sum rounded, as a kernel accumulating in bf16 does
  at N = 7): small probabilities are swamped, the cumulative lags, and the kept set shrinks.
  Boundary: processed_logprob, rollout side; only with top-p (it changes nothing without filters).
- ``trainer-expert-bits:N``: on an MoE model, expert 0's down projection (linear_fc2) in every MoE
  layer of the trainer computed as the tp-reduce control computes an MLP's (4 partial GEMMs, partials
  and sums at N bits); every other expert is Megatron's own. Boundary: layer.0.mlp, trainer side.
- ``rollout-fp8-weight-scale:F`` (harness/embedded/fp8.py): the rollout's fp8 weights are quantised
  with their block's scale and read back with F x that scale, as an engine holding a stale or
  mis-loaded weight scale does. Boundary: layer.0.attention (its q/k/v projections are the first
  quantised linears), rollout side; only with the fp8 rollout (--vllm-quantization fp8).
- ``rollout-fp8-weight-bits:N`` (harness/embedded/fp8.py): the fp8 rollout's weights rounded to N
  mantissa bits (1 or 2) in their block's scaled domain instead of e4m3's 3, as an engine whose
  weight quantiser drops mantissa bits does. Boundary: the fp8-weights boundary of every quantised
  linear (the lever ``fp8-weights``, the candidate ``fp8-block-linear``'s), rollout side; only with
  the fp8 rollout. The trainer quantises the weights it sends, so the control is set in its process
  and a trainer-side path that quantises alike (that lever) reads the same rounded weights.
"""

from __future__ import annotations

import torch

ACC_CHUNK = 32  # vocabulary entries summed in fp32 before the running sum is rounded to N bits
TP_RANKS = 4  # emulated tensor-parallel ranks of the reordered row-parallel reduction
TP_REDUCE_MARK = "_embedded_tp_reduce_bf16"  # set on the linear_fc2 modules the control acts on
BF16_BITS = 7  # bf16's explicit mantissa bits: ``*-bf16`` is ``*-bits:7``
FP32_BITS = 23  # fp32's: N = 23 rounds nothing
_ORIGINALS: dict = {}  # (class, attribute) -> the function before any control wrapped it


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x (any float dtype) rounded to ``bits`` explicit mantissa bits with fp32's exponent range,
    to nearest with ties to even, as fp32 -> bf16 rounds (N = 7 gives x.to(bfloat16) bit for bit,
    overflow to inf included; a NaN stays NaN); returned in fp32. Not differentiable: see ``RoundMantissa``."""
    if not 1 <= bits <= FP32_BITS:
        raise ValueError(f"bits={bits}: expected 1..{FP32_BITS} mantissa bits")
    x = x.float()
    if bits == FP32_BITS:
        return x
    shift = FP32_BITS - bits
    u = x.view(torch.int32)
    # round half to even on the integer pattern: add 0111..1 plus the kept part's lowest bit, then cut
    bias = ((u >> shift) & 1) + ((1 << (shift - 1)) - 1)
    rounded = ((u + bias) & ~((1 << shift) - 1)).view(torch.float32)
    return torch.where(torch.isnan(x), x, rounded)


class RoundMantissa(torch.autograd.Function):
    """``round_mantissa`` kept in x's dtype, gradient passed through unchanged (as the cast to a
    narrower dtype that it emulates passes it): for values that already hold N bits (a bf16 tensor
    at N = 7) forward and backward are the identity, bit for bit."""

    @staticmethod
    def forward(ctx, x, bits):
        return round_mantissa(x, bits).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _work_dtype(bits: int) -> torch.dtype:
    """The dtype a control computes in at N bits: bf16 up to its 7 bits (the control at N = 7 is
    the bf16 control as it was), fp32 above."""
    return torch.bfloat16 if bits <= BF16_BITS else torch.float32


def logsumexp_accumulated(x: torch.Tensor, bits: int) -> torch.Tensor:
    """log-sum-exp over the last dim with the running sum of exps held at ``bits`` mantissa bits
    (max-shifted; each chunk of ``ACC_CHUNK`` entries summed in fp32, then added and rounded)."""
    m = x.max(dim=-1, keepdim=True).values
    exps = torch.exp(x - m)
    total = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for chunk in exps.split(ACC_CHUNK, dim=-1):
        total = round_mantissa(total + chunk.float().sum(-1), bits)
    return m.squeeze(-1) + torch.log(total)


def logsumexp_bf16_accumulated(x: torch.Tensor) -> torch.Tensor:
    """log-sum-exp over the last dim with the running sum of exps held in bf16 (max-shifted)."""
    return logsumexp_accumulated(x, BF16_BITS)


def softmax_at_bits(scores: torch.Tensor, bits: int) -> torch.Tensor:
    """softmax over the last dim of scores rounded to ``bits``, its probabilities rounded to
    ``bits``; computed in bf16 up to 7 bits (torch's bf16 softmax: fp32 inside, bf16 out), in fp32
    above. At 7 bits: ``torch.softmax(scores.to(bfloat16), -1)``, forward and backward."""
    work = _work_dtype(bits)
    probs = torch.softmax(RoundMantissa.apply(scores, bits).to(work), dim=-1)
    return RoundMantissa.apply(probs, bits)


def softmax_sum_at_bits(scores: torch.Tensor, bits: int) -> torch.Tensor:
    """softmax over the last dim (fp32, max-shifted) whose denominator is the row's exps summed left
    to right at ``bits`` (the last of ``cumsum_at_bits``). Differentiable: the gradient is the exact softmax's, the rounding
    error of the sum a constant of the backward (as ``RoundMantissa`` passes its gradient)."""
    x = scores.float()
    exps = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    exact = exps.sum(dim=-1, keepdim=True)
    rounded = cumsum_at_bits(exps.detach(), bits)[..., -1:]
    return exps / (exact + (rounded - exact.detach()))


def row_parallel_reordered(
    x: torch.Tensor, weight: torch.Tensor, partial_dtype: torch.dtype, ranks: int = TP_RANKS, bits: int | None = None
) -> torch.Tensor:
    """x @ weight.T as ``ranks`` row-parallel ranks compute it: rank r's GEMM over its slice of the
    input features, its partial rounded to ``partial_dtype`` (and to ``bits`` mantissa bits when
    given), the partials summed last rank first (each sum in ``partial_dtype``, rounded to ``bits``),
    cast back to x's dtype. Differentiable."""

    def at_precision(t: torch.Tensor) -> torch.Tensor:
        t = t.to(partial_dtype)
        return t if bits is None else RoundMantissa.apply(t, bits)

    partials = [at_precision(torch.nn.functional.linear(xr, wr)) for xr, wr in zip(x.chunk(ranks, -1), weight.chunk(ranks, -1))]
    total = partials[-1]
    for partial in reversed(partials[:-1]):
        total = at_precision(total + partial)
    return total.to(x.dtype)


def _patch(cls, name: str, make) -> None:
    """Replace cls.name by make(original): the original as it was before any control, so a second
    install (another size in the same process) wraps the original, never the first control."""
    original = _ORIGINALS.setdefault((cls, name), getattr(cls, name))
    setattr(cls, name, make(original))


def _install_trainer_tp_reduce(bits: int) -> None:
    from megatron.core.tensor_parallel.layers import RowParallelLinear
    from megatron.core.transformer.mlp import MLP

    def make_init(original_init):
        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            setattr(self.linear_fc2, TP_REDUCE_MARK, True)  # the MLP's output projection only, not attention's

        return init

    def make_forward(original_forward):
        def forward_impl(self, input, weight, *args, **kwargs):
            if getattr(self, TP_REDUCE_MARK, False):
                return row_parallel_reordered(input, weight, _work_dtype(bits), bits=bits)
            return original_forward(self, input, weight, *args, **kwargs)

        return forward_impl

    _patch(MLP, "__init__", make_init)
    _patch(RowParallelLinear, "_forward_impl", make_forward)


def _install_rollout_lse(bits: int) -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    def make(original):
        def forward(self, logits, generators, k, p):
            sampled, logprobs = original(self, logits, generators, k, p)
            if logprobs is not None and self.logprobs_mode == "processed_logprobs":
                # logprobs = x - lse(x) exactly in fp32, so lse_N(logprobs) = lse_N(x) - lse(x):
                # subtracting it gives x - lse_N(x), the injected operator, on the same x.
                logprobs = logprobs - logsumexp_accumulated(logprobs, bits).unsqueeze(-1)
            return sampled, logprobs

        return forward

    for name in ("forward_cpu", "forward_native"):
        _patch(TopKTopPSampler, name, make)


def _install_trainer_softmax(bits: int, softmax=softmax_at_bits) -> None:
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax, get_default_causal_mask
    from megatron.core.transformer.enums import AttnMaskType

    def make(_original):
        def forward_torch_softmax(self, input, mask, softmax_offset=None):
            out_dtype = torch.bfloat16 if self.input_in_float16 else input.dtype
            x = input.float() * self.scale if self.scale is not None else input.float()
            sq = x.size(2)
            if mask is None and self.attn_mask_type == AttnMaskType.causal and sq > 1:
                mask = get_default_causal_mask(sq)
            masked = self.mask_func(x, mask) if mask is not None else x
            return softmax(masked, bits).to(out_dtype)

        return forward_torch_softmax

    _patch(FusedScaleMaskSoftmax, "forward_torch_softmax", make)


def cumsum_at_bits(probs: torch.Tensor, bits: int) -> torch.Tensor:
    """Cumulative sum along the last dim with every running sum rounded to ``bits`` mantissa bits."""
    out = torch.empty_like(probs, dtype=torch.float32)
    total = torch.zeros(probs.shape[:-1], dtype=torch.float32)
    for j in range(probs.shape[-1]):
        total = round_mantissa(total + probs[..., j].float(), bits)
        out[..., j] = total
    return out


def filter_at_bits(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None, bits: int) -> torch.Tensor:
    """vLLM's apply_top_k_top_p_pytorch (ascending sort, top-k by the k-th value, top-p by the
    cumulative of the sorted probabilities), its top-p cumulative kept at ``bits``."""
    if p is None and k is None:
        return logits
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        kth = logits_sort.gather(1, (logits_sort.size(1) - k.to(torch.long)).unsqueeze(dim=1))
        logits_sort.masked_fill_(logits_sort < kth, -float("inf"))
    if p is not None:
        probs_sum = cumsum_at_bits(logits_sort.softmax(dim=-1), bits)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
    return logits.scatter(dim=-1, index=logits_idx, src=logits_sort)


def _install_rollout_filter(bits: int) -> None:
    from vllm.v1.sample.ops import topk_topp_sampler as sampler_ops

    if not hasattr(sampler_ops, "_embedded_original_filter"):
        sampler_ops._embedded_original_filter = sampler_ops.apply_top_k_top_p
    sampler_ops.apply_top_k_top_p = lambda logits, k, p: filter_at_bits(logits, k, p, bits)


EXPERT_MARK = "_embedded_expert_control"


def _install_trainer_expert(bits: int) -> None:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.tensor_parallel.layers import RowParallelLinear

    def make_init(original_init):
        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            for layer in self.decoder.layers:
                experts = getattr(getattr(layer.mlp, "experts", None), "local_experts", None)
                if experts:
                    setattr(experts[0].linear_fc2, EXPERT_MARK, True)

        return init

    def make_forward(original_forward):
        def forward_impl(self, input, weight, *args, **kwargs):
            if getattr(self, EXPERT_MARK, False):
                return row_parallel_reordered(input, weight, _work_dtype(bits), bits=bits)
            return original_forward(self, input, weight, *args, **kwargs)

        return forward_impl

    _patch(GPTModel, "__init__", make_init)
    _patch(RowParallelLinear, "_forward_impl", make_forward)


LM_HEAD_MARK = "_embedded_lm_head_control"


def _install_trainer_lm_head(bits: int) -> None:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    def make_init(original_init):
        def init(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            if getattr(self, "output_layer", None) is not None:
                setattr(self.output_layer, LM_HEAD_MARK, True)

        return init

    def make_forward(original_forward):
        def forward_impl(self, input, weight, *args, **kwargs):
            if getattr(self, LM_HEAD_MARK, False):
                return row_parallel_reordered(input, weight, _work_dtype(bits), bits=bits)
            return original_forward(self, input, weight, *args, **kwargs)

        return forward_impl

    _patch(GPTModel, "__init__", make_init)
    _patch(ColumnParallelLinear, "_forward_impl", make_forward)


def install(faults, *, engine_in_process: bool) -> list[str]:
    """Install the numerical controls the faults ask for; returns one line per problem (empty: fine)."""
    from harness.embedded import fp8

    problems = []
    if faults.rollout_lse_bits:
        if not engine_in_process:
            problems.append(
                f"--embedded-inject {faults.name_of('rollout_lse_bits')}: needs vLLM's sampler in the trainer's process (--colocate, TP=1)"
            )
        else:
            _install_rollout_lse(faults.rollout_lse_bits)
    if faults.trainer_softmax_bits and faults.trainer_softmax_sum_bits:
        problems.append(
            f"--embedded-inject {faults.name_of('trainer_softmax_bits')},{faults.name_of('trainer_softmax_sum_bits')}: "
            "both replace the attention softmax; plant one at a time"
        )
    elif faults.trainer_softmax_bits:
        _install_trainer_softmax(faults.trainer_softmax_bits)
    elif faults.trainer_softmax_sum_bits:
        _install_trainer_softmax(faults.trainer_softmax_sum_bits, softmax=softmax_sum_at_bits)
    if faults.trainer_tp_reduce_bits:
        _install_trainer_tp_reduce(faults.trainer_tp_reduce_bits)
    if faults.trainer_lm_head_bits:
        _install_trainer_lm_head(faults.trainer_lm_head_bits)
    if faults.trainer_expert_bits:
        _install_trainer_expert(faults.trainer_expert_bits)
    if faults.rollout_filter_bits:
        if not engine_in_process:
            problems.append(
                f"--embedded-inject {faults.name_of('rollout_filter_bits')}: needs vLLM's sampler in the trainer's process (--colocate, TP=1)"
            )
        else:
            _install_rollout_filter(faults.rollout_filter_bits)
    # the trainer quantises the weights it sends to an fp8 engine (fp8.quantize_state_dict): the wrong
    # scale is set here, in the trainer's process, whatever the engine's mode; 1.0 (none) resets it
    fp8.set_weight_scale_factor(faults.rollout_fp8_weight_scale or 1.0)
    fp8.set_weight_mantissa_bits(faults.rollout_fp8_weight_bits or None)
    return problems
