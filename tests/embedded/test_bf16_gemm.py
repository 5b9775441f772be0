"""The trainer's bf16 GEMM route for a CPU without a native bf16 GEMM (harness/embedded/bf16_gemm.py).

The route claims one thing: a bf16 GEMM done as the fp32 GEMM of its exact bf16 operands, rounded
once. These tests hold it to that on the GEMMs Megatron reaches (linear forward and backward, core
attention's batched products), to PyTorch's own bf16 GEMM within the one rounding both do, and to
leaving every other op and dtype alone. They run the route directly, so they run on any machine,
including those where the trainer would not take it.
"""

from __future__ import annotations

import pytest
import torch

from harness.embedded import bf16_gemm

ROUTE = bf16_gemm.FP32_ACCUMULATED


def _bf16(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _one_bf16_rounding_apart(got: torch.Tensor, reference: torch.Tensor) -> bool:
    """Each element within one bf16 spacing of the other's value (8 significant bits)."""
    spacing = torch.ldexp(torch.ones_like(reference.float()), torch.frexp(reference.float().abs()).exponent - 8)
    return bool(((got.float() - reference.float()).abs() <= spacing).all())


@pytest.mark.parametrize(
    "name, gemm, operands",
    [
        ("mm", torch.mm, lambda: (_bf16(96, 64, seed=1), _bf16(64, 192, seed=2))),
        ("addmm", lambda b, x, w: torch.addmm(b, x, w), lambda: (_bf16(192, seed=3), _bf16(96, 64, seed=1), _bf16(64, 192, seed=2))),
        ("bmm", torch.bmm, lambda: (_bf16(8, 40, 32, seed=4), _bf16(8, 32, 40, seed=5))),
        (
            "baddbmm",
            lambda c, q, k: torch.baddbmm(c, q, k, beta=0.0, alpha=0.125),
            lambda: (_bf16(8, 40, 40, seed=6), _bf16(8, 40, 32, seed=4), _bf16(8, 32, 40, seed=5)),
        ),
    ],
)
def test_a_bf16_gemm_is_the_fp32_gemm_of_its_operands_rounded_once(name, gemm, operands):
    args = operands()
    with bf16_gemm.context(ROUTE):
        got = gemm(*args)
    assert got.dtype == torch.bfloat16, name
    expected = gemm(*(a.float() for a in args)).to(torch.bfloat16)
    assert torch.equal(got, expected), f"{name}: not the fp32 GEMM of the bf16 operands rounded once"
    # PyTorch's own bf16 GEMM (oneDNN here, or ATen's fallback) does the same arithmetic in another
    # order: the two may differ by the one rounding, never by more.
    assert _one_bf16_rounding_apart(got, gemm(*args)), name


def test_the_linear_layers_backward_takes_the_route_too():
    """Megatron's linear layers run their weight and input gradients as GEMMs in the backward pass."""
    layer = torch.nn.Linear(64, 192).to(torch.bfloat16)
    x = _bf16(256, 64, seed=7).requires_grad_(True)
    upstream = _bf16(256, 192, seed=8)
    with bf16_gemm.context(ROUTE):
        y = layer(x)
        y.backward(upstream)
    assert torch.equal(y, torch.addmm(layer.bias.float(), x.detach().float(), layer.weight.float().t()).to(torch.bfloat16))
    assert torch.equal(x.grad, (upstream.float() @ layer.weight.float()).to(torch.bfloat16))
    assert torch.equal(layer.weight.grad, (upstream.float().t() @ x.detach().float()).to(torch.bfloat16))


def test_other_ops_and_dtypes_pass_through_untouched():
    a32, b32 = torch.randn(64, 32), torch.randn(32, 48)
    with bf16_gemm.context(ROUTE):
        mm32 = a32 @ b32
        soft = torch.softmax(_bf16(4, 50, seed=9), dim=-1)
    assert torch.equal(mm32, a32 @ b32)
    assert torch.equal(soft, torch.softmax(_bf16(4, 50, seed=9), dim=-1))


def test_the_route_is_taken_only_for_a_bf16_trainer_without_native_bf16_gemm_and_not_for_true_on_policy():
    assert bf16_gemm.route(bf16=False, true_on_policy=False) == bf16_gemm.NATIVE
    # True on-policy needs the engine's kernel on both sides: the route would break the bitwise contract.
    assert bf16_gemm.route(bf16=True, true_on_policy=True) == bf16_gemm.NATIVE
    expected = bf16_gemm.NATIVE if bf16_gemm.native_bf16_gemm() else bf16_gemm.FP32_ACCUMULATED
    assert bf16_gemm.route(bf16=True, true_on_policy=False) == expected
