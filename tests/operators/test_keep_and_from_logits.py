"""The keep plan's kernels and the from-logits kernels under Triton's interpreter, the from-logits torch path,
the regimes' mass statistics, and the QuACK peer's availability answer, on CPU.

The keep plan (harness/operators/fused_keep.py) and the from-logits forward (harness/operators/from_logits.py)
are GPU kernels; here their indexing, masking and scales are checked against fp32/fp64 references, and bitwise
where the design says so (a TP shard's gradients and a slice of rows equal the unsplit ones), under the
fixed-order dot of test_triton_kernel_interpreted.py. The bits of the real kernels are the GPU's: the bench's
records (reports/bench/).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness.operators import registry
from harness.operators.bundles import BundleShape
from harness.operators.from_logits import selected_logprobs_from_logits
from harness.operators.regimes import entries_for_mass, input_stats, regime_bundle
from tests.operators.conftest import threshold
from tests.operators.test_triton_kernel_interpreted import FIXED_ORDER_DOT

pytestmark = pytest.mark.operator

ROOT = Path(__file__).resolve().parents[2]

# V=1024: groups of 128 columns start 16-byte aligned in the fp16 buffer (TMA needs it; the plan asks V % 64 == 0),
# forward chunks of 8-9 columns leave every tile of 32 partly masked.
KEEP_SCRIPT = FIXED_ORDER_DOT + textwrap.dedent("""
    import sys
    import torch
    from harness.operators.fused_plan import chunk_bounds, group_bounds, merge_partials, shard_chunk_bounds, shard_group_bounds
    from harness.operators.fused_torch import torch_backward_groups
    from harness.operators.fused_triton import BackwardConfig, KernelConfig, triton_partials
    from harness.operators.fused_keep import keep_backward, keep_partials
    gen = torch.Generator().manual_seed(0)
    T, H, V = 21, 64, 1024
    h = torch.randn(T, H, generator=gen); w = torch.randn(V, H, generator=gen) * 0.1
    t = torch.randint(0, V, (T,), generator=gen); g = torch.randn(T, generator=gen) * float(sys.argv[2])
    fcfg = KernelConfig(16, 32, 16, 4, 2, "dtma_flatten", exp2=True)
    cfg = BackwardConfig(block_t=16, block_v=32, block_k=16, num_warps=4, num_stages=2, hidden_block_h=32, hidden_warps=4, hidden_stages=2)
    parts, kept = keep_partials(h, w, t, chunk_bounds(V), 0.7, fcfg)
    assert all(torch.equal(a, b) for a, b in zip(parts, triton_partials(h, w, t, chunk_bounds(V), 0.7, fcfg))), "partials differ"
    logp, lse = merge_partials(*parts)
    def run(rows, tp):
        gh, gw, shards = torch.empty(len(rows), H), torch.empty(V, H), []
        for r in range(tp):
            s0, cloc = shard_chunk_bounds(V, tp, r)
            _, gloc = shard_group_bounds(V, tp, r)
            ws = w[s0:s0 + V // tp]
            _, k = keep_partials(h[rows], ws, t[rows] - s0, cloc, 0.7, fcfg)
            shards.append((ws, t[rows] - s0, k, gloc, gw[s0:s0 + V // tp]))
        keep_backward(h[rows], shards, logp[rows], lse[rows], 0.7, g[rows], gh, cfg)
        return gh, gw
    gh, gw = run(list(range(T)), 1)
    want_w, want_h = torch.empty(V, H), None
    for p in torch_backward_groups(h, w, t, lse, 0.7, g, group_bounds(V), want_w):
        want_h = p.clone() if want_h is None else want_h + p
    tol = float(sys.argv[1])
    errs = (float((gh - want_h).abs().max() / want_h.abs().max()), float((gw - want_w).abs().max() / want_w.abs().max()))
    print("max rel errors", errs)
    assert max(errs) <= tol, errs
    gh2, gw2 = run(list(range(T)), 2)
    assert torch.equal(gh2, gh) and torch.equal(gw2, gw), "TP=2 changed bits"
    gh3, _ = run(list(range(3, 10)), 1)
    assert torch.equal(gh3, gh[3:10]), "rows 3:10 alone differ from the same rows in the batch"
    import harness.operators.fused_keep as fk
    # Every launch order and row block of the conversion (32 rows: past the forward's 16, so the buffer's padding
    # is the conversion's), and the plain-store, torch-copy and separate-add paths, give the same bits.
    for group_t, chunk_first, convert_rows, aligned, in_kernel in ((1, True, 8, False, False), (2, False, 32, True, True), (5, True, 4, False, True)):
        fk.FORWARD_GROUP_T, fk.CONVERT_CHUNK_FIRST, fk.CONVERT_BLOCK_T = group_t, chunk_first, convert_rows
        fk.CONVERT_ALIGNED, fk.GROUP_SUM_IN_KERNEL, fk.WEIGHT_COPY_TRITON = aligned, in_kernel, in_kernel
        assert all(torch.equal(a, b) for a, b in zip(parts, keep_partials(h, w, t, chunk_bounds(V), 0.7, fcfg)[0])), group_t
        gh4, gw4 = run(list(range(T)), 1)
        assert torch.equal(gh4, gh) and torch.equal(gw4, gw), ("launch order changed bits", group_t, chunk_first, convert_rows)
        gh5, gw5 = run(list(range(T)), 2)
        assert torch.equal(gh5, gh) and torch.equal(gw5, gw), ("TP=2 changed bits", group_t, chunk_first, convert_rows)
    print("ok")
""")

# The conversion alone on a buffer whose chunks (V = 8192: 68-69 columns) hold whole aligned windows of the forward's
# 16-column tiles, a skew of 0-7 columns and a tail: the aligned walk gives the per-tile walk's bits.
CONVERT_SCRIPT = textwrap.dedent("""
    import torch
    import triton
    from harness.operators.fused_plan import chunk_bounds
    from harness.operators.fused_triton import _bounds_tensor
    from harness.operators.fused_keep import _keep_convert_kernel
    gen = torch.Generator().manual_seed(0)
    T, V, BV, BT = 21, 8192, 16, 8
    bounds = chunk_bounds(V)
    tiles = max(triton.cdiv(b - a, BV) for a, b in zip(bounds[:-1], bounds[1:]))
    y = (torch.rand(triton.cdiv(T, BT) * BT, V, generator=gen) * 32768).half()
    ymax = torch.randn(len(bounds) - 1, tiles, T, generator=gen)
    tgt = torch.randint(0, V, (T,), generator=gen)
    lse, logp, gs = torch.randn(T, generator=gen) + 5, -torch.rand(T, generator=gen), torch.rand(T, generator=gen) + 0.5
    outs = []
    for aligned in (False, True):
        buf = y.clone()
        _keep_convert_kernel[(triton.cdiv(T, BT) * (len(bounds) - 1),)](
            buf, ymax, _bounds_tensor(tuple(bounds), "cpu"), tgt, lse, logp, gs, T, V, len(bounds) - 1,
            MAX_TILES=tiles, BLOCK_T=BT, BLOCK_V=BV, CHUNK_FIRST=True, ALIGNED=aligned)
        outs.append(buf[:T])
    assert not torch.equal(outs[0], y[:T]), "nothing converted"
    assert torch.equal(outs[0], outs[1]), "the aligned walk changed bits"
    print("ok")
""")

LOGITS_SCRIPT = textwrap.dedent("""
    import torch
    from harness.operators.from_logits import logits_logprob, logits_logprob_backward
    gen = torch.Generator().manual_seed(0)
    T, V = 37, 1000   # blocks of 4096: one masked block per row
    z = torch.randn(T, V, generator=gen) * 3; t = torch.randint(0, V, (T,), generator=gen); g = torch.randn(T, generator=gen)
    z[5, 17] = float("-inf")   # a masked-out logit adds nothing
    for dt in (torch.float32, torch.float16):
        zz = z.to(dt)
        ref = torch.log_softmax(zz.double() / 0.7, -1).gather(1, t[:, None]).squeeze(1)
        logp, lse = logits_logprob(zz, t, 0.7, triton_path=True)
        err = float((logp.double() - ref).abs().max())
        assert err < 2e-5, (dt, err)
        assert torch.equal(logits_logprob(zz[3:10], t[3:10], 0.7, triton_path=True)[0], logp[3:10]), "rows alone differ"
        grad = logits_logprob_backward(zz, t, lse, g, 0.7, grad_dtype=torch.float32, triton_path=True)
        p = torch.softmax(zz.double() / 0.7, -1)
        want = (torch.zeros_like(p).scatter_(1, t[:, None], 1.0) - p) * (g.double() / 0.7)[:, None]
        rel = float((grad.double() - want).norm() / want.norm())
        assert rel < 1e-5, (dt, rel)
    print("ok")
""")


def _interpret(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("grad_scale", ["1.0", "1.2207e-4"], ids=["summed-loss", "mean-loss"])
def test_keep_plan_kernels_match_the_torch_plan_under_the_interpreter(grad_scale):
    pytest.importorskip("triton")
    # G is rounded to fp16 twice (the kept term, then grad_logits): within the fp16 grad_logits tolerance
    proc = _interpret(KEEP_SCRIPT, str(threshold("fp16_grad_logits_max_rel_err")), grad_scale)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-500:], proc.stderr[-2000:])


def test_keep_conversion_in_aligned_windows_gives_the_per_tile_bits():
    pytest.importorskip("triton")
    proc = _interpret(CONVERT_SCRIPT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-500:], proc.stderr[-2000:])


def test_from_logits_kernels_match_fp64_under_the_interpreter():
    pytest.importorskip("triton")
    proc = _interpret(LOGITS_SCRIPT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-500:], proc.stderr[-2000:])


def test_from_logits_torch_path_gradients_and_batch_invariance():
    gen = torch.Generator().manual_seed(3)
    z = (torch.randn(40, 3000, generator=gen) * 4).requires_grad_()
    t = torch.randint(0, 3000, (40,), generator=gen)
    g = torch.randn(40, generator=gen)
    logp = selected_logprobs_from_logits(z, t, 0.9)
    z64 = z.detach().double().requires_grad_()
    ref = torch.log_softmax(z64 / 0.9, -1).gather(1, t[:, None]).squeeze(1)
    assert float((logp.detach().double() - ref).abs().max()) < threshold("fused_max_abs_err")
    (logp * g).sum().backward()
    (ref * g.double()).sum().backward()
    assert float((z.grad.double() - z64.grad).norm() / z64.grad.norm()) < threshold("fused_backward_rel_err_fp32")
    with torch.no_grad():
        assert torch.equal(selected_logprobs_from_logits(z[7:12], t[7:12], 0.9), logp[7:12])


def test_entries_for_mass_counts_the_largest_entries_first():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.97, 0.01, 0.01, 0.01], [0.25, 0.25, 0.25, 0.25]])
    assert entries_for_mass(p.log(), 0.99).tolist() == [4, 3, 4]
    assert entries_for_mass(p.log(), 0.9).tolist() == [3, 1, 4]


def test_peaked_and_flat_regimes_are_what_their_names_say_at_the_production_shape():
    # the statistics scale with H and V, so these are checked at H=2048, V=151936 (32 rows)
    shape = BundleShape(tokens=32, hidden=2048, vocab=151936, seed=0)
    peaked = input_stats(*_operands(regime_bundle("peaked", shape)))
    assert 0.85 <= peaked["mean_target_prob"] <= 0.95 and peaked["entries_for_99pct_mass_quantiles"]["p90"] <= 5, peaked
    flat = input_stats(*_operands(regime_bundle("flat", shape)))
    q = flat["entropy_nats_quantiles"]
    assert 4.5 <= flat["mean_entropy_nats"] <= 5.5 and q["p10"] >= 4.0 and q["p90"] <= 6.0, flat
    assert flat["entries_for_99pct_mass_quantiles"]["p10"] > 1e4 and flat["mean_target_prob"] < 0.1, flat


def _operands(bundle):
    return bundle.hidden, bundle.weight, bundle.targets


def test_keep_operator_off_the_gpu_runs_the_fast_plan_and_says_so(small_bundle_cpu):
    keep, fast = registry.get("fused-linear-logprob-keep"), registry.get("fused-linear-logprob")
    b = small_bundle_cpu
    g = torch.randn(b.hidden.shape[0], generator=torch.Generator().manual_seed(1))
    got = keep.fp32_gradients(b.hidden, b.weight, b.targets, 1.0, g)
    want = fast.fp32_gradients(b.hidden, b.weight, b.targets, 1.0, g)
    assert all(torch.equal(a, c) for a, c in zip(got, want))
    keep.selected_logprobs(b.hidden, b.weight, b.targets)
    assert "fast plan" in keep.last_path


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_quack_peer_says_why_it_cannot_run_here():
    ok, why = registry.get("quack-linear-ce").available()
    assert not ok and "cuda" in why
