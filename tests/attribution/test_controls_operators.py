"""The numerical controls' operators (harness/embedded/numeric_faults.py, harness/embedded/fp8.py),
no runs: rounding to N mantissa bits is bf16's rounding at N = 7, bit for bit; each sized control at
N = 7 is the bf16 control as it shipped (its code kept below as the reference), forward and
backward; the wrong fp8 scale reads the weights back with F x their scale and leaves the default
untouched."""

from __future__ import annotations

import pytest
import torch

from harness.embedded import fp8
from harness.embedded.numeric_faults import (
    ACC_CHUNK,
    logsumexp_accumulated,
    logsumexp_bf16_accumulated,
    round_mantissa,
    row_parallel_reordered,
    softmax_at_bits,
    softmax_sum_at_bits,
)

pytestmark = pytest.mark.attribution


def _bits_of(t: torch.Tensor) -> torch.Tensor:
    return t.float().view(torch.int32)


def _wide_range(seed: int = 0, n: int = 200_000) -> torch.Tensor:
    """fp32 values over the whole exponent range (subnormals, the largest finite, ties) and the specials."""
    g = torch.Generator().manual_seed(seed)
    mantissa = torch.randn(n, generator=g)
    exponent = torch.randint(-45, 39, (n,), generator=g).float()
    x = mantissa * torch.pow(10.0, exponent)
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130 * (1 + 2**-8)])  # exact halfway cases at 7 bits
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.4028235e38, -3.4028235e38, 1e-45, -1e-40])
    return torch.cat([x, ties, special])


# --- the bf16 controls as they shipped (the reference the sized controls must equal at N = 7) ---


def _shipped_logsumexp_bf16(x: torch.Tensor) -> torch.Tensor:
    m = x.max(dim=-1, keepdim=True).values
    exps = torch.exp(x - m)
    total = torch.zeros(x.shape[:-1], dtype=torch.bfloat16)
    for chunk in exps.split(ACC_CHUNK, dim=-1):
        total = (total.float() + chunk.float().sum(-1)).to(torch.bfloat16)
    return m.squeeze(-1) + torch.log(total.float())


def _shipped_softmax_bf16(masked: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return torch.softmax(masked.to(torch.bfloat16), dim=-1).to(out_dtype)


def _shipped_row_parallel(x: torch.Tensor, weight: torch.Tensor, ranks: int = 4) -> torch.Tensor:
    partials = [torch.nn.functional.linear(xr, wr).to(torch.bfloat16) for xr, wr in zip(x.chunk(ranks, -1), weight.chunk(ranks, -1))]
    total = partials[-1]
    for partial in reversed(partials[:-1]):
        total = total + partial
    return total.to(x.dtype)


def _shipped_quantize_weight_blockwise(w: torch.Tensor) -> torch.Tensor:
    rows, cols = w.shape
    pr, pc = -rows % fp8.BLOCK, -cols % fp8.BLOCK
    padded = torch.nn.functional.pad(w.float(), (0, pc, 0, pr))
    blocks = padded.view(padded.shape[0] // fp8.BLOCK, fp8.BLOCK, padded.shape[1] // fp8.BLOCK, fp8.BLOCK)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    scaled = (blocks / (amax / fp8.E4M3_MAX)).clamp(-fp8.E4M3_MAX, fp8.E4M3_MAX)
    deq = (scaled.to(torch.float8_e4m3fn).float() * (amax / fp8.E4M3_MAX)).view_as(padded)
    return deq[:rows, :cols].to(w.dtype)


# --- rounding to N bits ---


def test_seven_bits_is_bf16_bit_for_bit():
    x = _wide_range()
    assert torch.equal(_bits_of(round_mantissa(x, 7)), _bits_of(x.to(torch.bfloat16)))
    assert torch.isnan(round_mantissa(torch.tensor([float("nan")]), 7)).all()


@pytest.mark.parametrize("bits", [1, 3, 5, 10, 16, 22])
def test_n_bits_keeps_n_bits_and_rounds_to_nearest(bits):
    x = _wide_range(seed=bits)
    x = x[torch.isfinite(x) & (x.abs() < 1e38) & (x.abs() > 1e-37)]  # normals away from overflow
    r = round_mantissa(x, bits)
    assert not bool((_bits_of(r) & ((1 << (23 - bits)) - 1)).any())  # the dropped bits are zero
    # within half a unit in the last kept place (relative 2^-(N+1)) of the exact value
    assert float(((r.double() - x.double()).abs() / x.double().abs()).max()) <= 2.0 ** -(bits + 1)
    assert torch.equal(round_mantissa(r, bits), r)  # idempotent


def test_twenty_three_bits_rounds_nothing_and_bad_sizes_are_refused():
    x = _wide_range()
    assert torch.equal(_bits_of(round_mantissa(x, 23)), _bits_of(x))
    for bits in (0, 24):
        with pytest.raises(ValueError, match="mantissa bits"):
            round_mantissa(x, bits)


# --- each control at N = 7 is the bf16 control as it shipped ---


def test_rollout_lse_at_seven_bits_is_the_bf16_control():
    logits = torch.randn(64, 1000, generator=torch.Generator().manual_seed(1)) * 4
    shipped = _shipped_logsumexp_bf16(logits)
    assert torch.equal(_bits_of(logsumexp_accumulated(logits, 7)), _bits_of(shipped))
    assert torch.equal(_bits_of(logsumexp_bf16_accumulated(logits)), _bits_of(shipped))


def test_rollout_lse_error_grows_as_bits_shrink():
    logits = torch.randn(64, 1000, generator=torch.Generator().manual_seed(2)) * 4
    exact = torch.logsumexp(logits.double(), -1)
    errors = [float((logsumexp_accumulated(logits, n).double() - exact).abs().mean()) for n in (16, 10, 7, 4)]
    assert errors == sorted(errors) and errors[0] < errors[-1], errors


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_trainer_softmax_at_seven_bits_is_the_bf16_control_forward_and_backward(out_dtype):
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 4, 16, 16, generator=g) * 3
    scores = torch.where(torch.ones(16, 16, dtype=torch.bool).triu(1), torch.full_like(scores, -10000.0), scores)  # a causal mask
    upstream = torch.randn(2, 4, 16, 16, generator=g)
    outs, grads = [], []
    for fn in (lambda s: _shipped_softmax_bf16(s, out_dtype), lambda s: softmax_at_bits(s, 7).to(out_dtype)):
        s = scores.clone().requires_grad_(True)
        y = fn(s)
        (y.float() * upstream).sum().backward()
        outs.append(y.detach())
        grads.append(s.grad)
    assert outs[0].dtype == outs[1].dtype == out_dtype
    assert torch.equal(_bits_of(outs[0]), _bits_of(outs[1]))
    assert torch.equal(_bits_of(grads[0]), _bits_of(grads[1]))


def test_trainer_softmax_at_fewer_bits_moves_further_from_fp32():
    scores = torch.randn(4, 32, 32, generator=torch.Generator().manual_seed(4)) * 3
    exact = torch.softmax(scores.double(), -1)
    errors = [float((softmax_at_bits(scores, n).double() - exact).abs().mean()) for n in (16, 7, 5, 3)]
    assert errors == sorted(errors) and errors[0] < errors[-1], errors


def _bf16_causal_scores(seed: int) -> torch.Tensor:
    """Attention scores as a bf16 trainer hands them to its softmax: bf16 values, a causal mask."""
    scores = (torch.randn(2, 4, 40, 40, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
    return torch.where(torch.ones(40, 40, dtype=torch.bool).triu(1), torch.full_like(scores, -10000.0), scores)


def test_trainer_softmax_at_seven_bits_is_the_identity_on_a_bf16_trainer():
    """Why trainer-softmax-bf16 moves nothing on the bf16 rungs: their scores are bf16 already and
    Megatron's fp32 softmax hands back bf16 probabilities, so rounding both to 7 bits changes no bit."""
    scores = _bf16_causal_scores(6)
    native = torch.softmax(scores, dim=-1).bfloat16()
    assert torch.equal(_bits_of(softmax_at_bits(scores, 7).bfloat16()), _bits_of(native))


def test_trainer_softmax_sum_at_seven_bits_is_a_bf16_size_fault_on_a_bf16_trainer():
    """The row sum held at bf16 scales each row by one factor (1 + a few bf16 ulps), which survives
    the cast to bf16 on many probabilities: a fault at bf16 size where the rounding control is none."""
    scores = _bf16_causal_scores(7)
    native = torch.softmax(scores, dim=-1)
    faulted = softmax_sum_at_bits(scores, 7)
    ratio = (faulted / native)[native > 1e-3].flatten()
    assert float((ratio - 1).abs().max()) < 40 * 2**-8  # at most a row's length of bf16 half-ulps
    per_row = faulted / native
    row_scale = per_row[..., :1]  # position 0 is never masked: each row's one factor
    assert torch.allclose(per_row[native > 0], row_scale.expand_as(per_row)[native > 0], rtol=1e-5)
    moved = (faulted.bfloat16() != native.bfloat16())[native > 0].float().mean()
    assert 0.05 < float(moved) < 1.0, float(moved)
    assert torch.allclose(softmax_sum_at_bits(scores, 23), native, rtol=1e-5, atol=1e-7)


def test_trainer_softmax_sum_passes_the_exact_softmax_gradient():
    scores = _bf16_causal_scores(8)
    upstream = torch.randn(scores.shape, generator=torch.Generator().manual_seed(9))
    grads = []
    for fn in (lambda s: torch.softmax(s, -1), lambda s: softmax_sum_at_bits(s, 7)):
        s = scores.clone().requires_grad_(True)
        (fn(s) * upstream).sum().backward()
        grads.append(s.grad)
    # the faulted forward's own gradient: the exact softmax's, but for the rows' small scale error
    assert torch.isfinite(grads[1]).all() and float((grads[1] - grads[0]).norm() / grads[0].norm()) < 0.05


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_trainer_tp_reduce_at_seven_bits_is_the_bf16_control_forward_and_backward(dtype):
    g = torch.Generator().manual_seed(5)
    x0, w0 = torch.randn(12, 64, generator=g).to(dtype), (torch.randn(32, 64, generator=g) * 0.1).to(dtype)
    upstream = torch.randn(12, 32, generator=g)
    results = []
    for fn in (_shipped_row_parallel, lambda x, w: row_parallel_reordered(x, w, torch.bfloat16, bits=7)):
        x, w = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        y = fn(x, w)
        (y.float() * upstream).sum().backward()
        results.append((y.detach(), x.grad, w.grad))
    for shipped, sized in zip(*results):
        assert shipped.dtype == sized.dtype
        assert torch.equal(_bits_of(shipped), _bits_of(sized))


def test_trainer_tp_reduce_above_seven_bits_approaches_the_plain_gemm():
    g = torch.Generator().manual_seed(6)
    x, w = torch.randn(12, 256, generator=g), torch.randn(32, 256, generator=g) * 0.1
    exact = (x.double() @ w.double().T).float()
    errors = [float((row_parallel_reordered(x, w, torch.float32, bits=n) - exact).abs().mean()) for n in (20, 12, 7, 4)]
    assert errors == sorted(errors) and errors[0] < errors[-1], errors


# --- the wrong fp8 scale ---


@pytest.fixture
def scale_factor():
    """Sets the control's factor for one test and always puts the default back."""
    yield fp8.set_weight_scale_factor
    fp8.set_weight_scale_factor(1.0)


def test_fp8_weights_by_default_are_as_shipped():
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16) * 0.05
    assert torch.equal(_bits_of(fp8.quantize_weight_blockwise(w)), _bits_of(_shipped_quantize_weight_blockwise(w)))


@pytest.mark.parametrize("factor", [0.5, 0.99, 1.25])
def test_a_wrong_fp8_scale_reads_every_block_back_scaled(scale_factor, factor):
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(8)) * 0.05
    right = fp8.quantize_weight_blockwise(w)
    scale_factor(factor)
    wrong = fp8.quantize_weight_blockwise(w)
    assert torch.equal(_bits_of(wrong), _bits_of(right * factor))
    quantised = fp8.quantize_state_dict({"model.layers.0.self_attn.q_proj.weight": w, "lm_head.weight": w})
    assert torch.equal(_bits_of(quantised["model.layers.0.self_attn.q_proj.weight"]), _bits_of(right * factor))
    assert torch.equal(quantised["lm_head.weight"], w)  # the LM head stays unquantised, so unscaled


def test_a_scale_factor_must_be_positive(scale_factor):
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="positive scale factor"):
            scale_factor(bad)
