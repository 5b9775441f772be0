"""The linear boundary in the registry, and its candidate operator: registered like any plug-in, batch
invariant (a row's result is the same alone or beside others), accurate to its contract, and the
same computation in both engines' hooks (harness.embedded.linear_operator)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.operators import registry
from harness.operators.contract import SELECTED_LOGPROB_BOUNDARY
from harness.operators.impl_linear import ordered_sum_linear
from harness.operators.linear_contract import LINEAR_BOUNDARY, LinearContract, LinearOperandError, LinearOperator

pytestmark = pytest.mark.operator

CANDIDATE = "fp8-block-linear"
LINEAR_BUILTINS = {CANDIDATE, "megatron-native-linear", "vllm-native-linear", "fp64-linear-reference"}


def _operands(rows: int, n: int, k: int, seed: int = 0, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * 0.05).to(dtype)
    return x, w


def test_the_linear_boundary_is_listed_apart_from_the_log_prob_operators():
    assert LINEAR_BUILTINS == set(registry.names(LINEAR_BOUNDARY))
    assert not LINEAR_BUILTINS & set(registry.names())  # the default stays the selected log-prob
    assert {LINEAR_BOUNDARY, SELECTED_LOGPROB_BOUNDARY} <= set(registry.boundaries())
    for name in LINEAR_BUILTINS:
        op = registry.get(name)
        assert op.boundary == LINEAR_BOUNDARY and isinstance(op.contract, LinearContract) and op.contract.gpu_form
    assert registry.get(CANDIDATE).contract.batch_invariant_by_design


def test_a_plug_in_factory_registers_at_its_own_boundary():
    class Doubled(LinearOperator):
        contract = LinearContract(
            summary="a test plug-in",
            weight_form="as given",
            operand_dtype="fp32",
            accumulate_dtype="fp32",
            rounds_at=["output"],
            reduction_order="torch's",
            batch_invariant_by_design=False,
            gpu_form="none",
        )

        def _linear(self, x, weight):
            return 2 * torch.nn.functional.linear(x, weight)

    name = "test-doubled-linear"
    registry.register(name, lambda: Doubled())  # a zero-argument factory, as an entry point may give
    try:
        assert registry.boundary_of(name) == LINEAR_BOUNDARY and name in registry.names(LINEAR_BOUNDARY)
        x, w = _operands(3, 4, 8, dtype=torch.float32)
        assert torch.equal(registry.get(name).linear(x, w), 2 * torch.nn.functional.linear(x, w))
    finally:
        registry._factories.pop(name)
        registry._instances.pop(name, None)


def test_bad_operands_get_one_line():
    op = registry.get(CANDIDATE)
    with pytest.raises(LinearOperandError, match=r"x must be \[\.\.\., K=8\]"):
        op.linear(torch.zeros(2, 4), torch.zeros(3, 8))
    with pytest.raises(LinearOperandError, match=r"weight must be \[N, K\]"):
        op.linear(torch.zeros(2, 8), torch.zeros(3, 8, 1))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 70),
    pick=st.integers(0, 69),
    n=st.sampled_from([16, 64, 96]),
    k=st.sampled_from([8, 64, 128, 192]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.bfloat16, torch.float32]),
)
def test_a_row_is_the_same_alone_or_beside_others(rows, pick, n, k, seed, dtype):
    x, w = _operands(rows, n, k, seed, dtype)
    row = pick % rows
    op = registry.get(CANDIDATE)
    together = op.linear(x, w)
    alone = op.linear(x[row : row + 1], w)
    assert torch.equal(alone[0], together[row])
    # and beside other rows than its own batch's
    others, _ = _operands(5, n, k, seed + 1, dtype)
    mixed = op.linear(torch.cat([others[:2], x[row : row + 1], others[2:]]), w)
    assert torch.equal(mixed[2], together[row])


def test_the_fp32_sum_is_within_its_rounding_bound_of_fp64():
    x, w = _operands(64, 96, 192)
    got = ordered_sum_linear(x, w).double()
    exact = x.double() @ w.double().T
    # k sequential fp32 adds: each partial sum rounds by at most 2^-24 of itself, itself at most sum |x_k w_k|
    bound = x.shape[1] * 2.0**-24 * (x.double().abs() @ w.double().abs().T)
    assert bool(((got - exact).abs() <= bound).all())


def test_both_engines_hooks_compute_the_same_numbers():
    """The trainer's autograd path and the engine's dispatch call give the same output for the same
    operands, and the trainer's backward is the GEMM's gradient."""
    from harness.embedded.linear_operator import _engine_call, _OperatorLinear

    op = registry.get(CANDIDATE)
    x, w = _operands(33, 64, 128)
    x.requires_grad_(True)
    wp = w.clone().requires_grad_(True)
    trainer = _OperatorLinear.apply(x, wp, op)
    engine = _engine_call(op, w, x.detach(), torch.empty(0))
    assert torch.equal(trainer.detach(), engine)
    grad = torch.randn_like(trainer)
    trainer.backward(grad)
    xr, wr = x.detach().float().requires_grad_(True), w.float().requires_grad_(True)
    torch.nn.functional.linear(xr, wr).backward(grad.float())
    torch.testing.assert_close(x.grad.float(), xr.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(wp.grad.float(), wr.grad, rtol=2e-2, atol=2e-2)


def test_the_rollouts_fp8_weight_form_is_a_fixed_point():
    """The engine holds the rollout's FP8 weight; the trainer puts its own weight into that form: the
    form is idempotent, so both hand the operator the same weight whichever side quantised it."""
    from harness.embedded import fp8

    for seed in range(20):
        _, w = _operands(1, 256, 192, seed)
        held = fp8.quantize_weight_blockwise(w)
        assert torch.equal(fp8.quantize_weight_blockwise(held), held)


def test_the_unknown_linear_operator_is_one_line():
    from harness.embedded.linear_operator import LinearOperatorChoiceError, resolve

    with pytest.raises(LinearOperatorChoiceError, match="no linear operator of that name; expected native or one of .*fp8-block-linear"):
        resolve("no-such-linear")
    assert resolve("native") is None and resolve(CANDIDATE).name == CANDIDATE
