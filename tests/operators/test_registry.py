"""The registry: built-ins, contracts, availability, clear errors, and a real entry-point plug-in."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from harness.operators import OperandError, registry
from harness.operators.contract import Contract

pytestmark = pytest.mark.operator

BUILTINS = {
    "fp64-reference",
    "fp64-reference-processed",
    "megatron-native",
    "vllm-native",
    "vllm-processed",
    "fp8-per-tensor",
    "fp8-block",
    "liger-fused-linear-ce",
    "fused-linear-logprob",
    "fused-linear-logprob-keep",
    "quack-linear-ce",
}


def test_every_builtin_is_registered_with_a_contract():
    assert BUILTINS <= set(registry.names())
    for name in BUILTINS:
        op = registry.get(name)
        assert op.name == name and isinstance(op.contract, Contract)
        assert op.contract.rounds_at and op.contract.reduction_order and op.contract.tp_handling


def test_unknown_name_says_what_is_registered():
    with pytest.raises(registry.UnknownOperator) as info:
        registry.get("no-such-operator")
    assert "fused-linear-logprob" in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_gpu_only_operator_says_why_it_cannot_run_here():
    ok, why = registry.get("liger-fused-linear-ce").available()
    assert not ok and "cuda" in why


def test_bad_operands_get_one_clear_line():
    op = registry.get("fused-linear-logprob")
    h, w = torch.zeros(3, 8), torch.zeros(16, 8)
    with pytest.raises(OperandError, match=r"targets must lie in \[0, V=16\)"):
        op.selected_logprobs(h, w, torch.tensor([0, 1, 16]))
    with pytest.raises(OperandError, match="tp_size must be 1, 2, 4 or 8"):
        op.selected_logprobs(h, w, torch.tensor([0, 1, 2]), tp_size=3)
    with pytest.raises(OperandError, match="hidden size differs"):
        op.selected_logprobs(torch.zeros(3, 4), w, torch.tensor([0, 1, 2]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU path's range check runs in its merge kernel")
def test_out_of_range_targets_on_the_gpu_come_back_nan_and_raise_once_checked():
    op = registry.get("fused-linear-logprob")
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(300, 256, generator=gen).to("cuda", torch.bfloat16)
    w = (torch.randn(4000, 256, generator=gen) * 0.03).to("cuda", torch.bfloat16)
    t = torch.randint(0, 4000, (300,), generator=gen).cuda()
    good = op.selected_logprobs(h, w, t)
    op.check_targets()  # in range: nothing to raise
    t[7] = 4000
    out = op.selected_logprobs(h, w, t)
    with pytest.raises(OperandError, match=r"targets must lie in \[0, V=4000\); an earlier call on the GPU had 1 or more"):
        op.check_targets()
    rest = torch.arange(300, device="cuda") != 7
    assert bool(out[7].isnan()) and torch.equal(out[rest], good[rest])
    op.check_targets()  # reported once


def test_plugin_from_an_installed_distribution_is_found(tmp_path, monkeypatch):
    """A real dist-info with an entry point in the group, on sys.path: what `pip install` leaves."""
    (tmp_path / "bcard_ops.py").write_text(
        textwrap.dedent("""
        from harness.operators.impl_fused import FusedLinearLogprobOperator

        class BCardLogprob(FusedLinearLogprobOperator):
            pass
    """)
    )
    dist = tmp_path / "bcard_ops-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bcard-ops\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\nbcard-logprob = bcard_ops:BCardLogprob\nbroken = bcard_ops:Missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_factories", dict(registry._factories))
    monkeypatch.setattr(registry, "_instances", {})
    monkeypatch.setattr(registry, "_load_errors", {})
    assert "bcard-logprob" in registry.names()
    assert "broken" in registry.plugin_errors() and "Missing" in registry.plugin_errors()["broken"]
    op = registry.get("bcard-logprob")
    h, w, t = torch.randn(4, 64).bfloat16(), torch.randn(128, 64).bfloat16(), torch.tensor([0, 5, 64, 127])
    assert torch.equal(op.selected_logprobs(h, w, t), registry.get("fused-linear-logprob").selected_logprobs(h, w, t))
    sys.modules.pop("bcard_ops", None)
