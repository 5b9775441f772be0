"""Where the fused operator's fwd+bwd time goes on a GPU, kernel by kernel, and what the keep plan costs.

    python tools/probe_fused_parts.py --out /tmp/parts.json [--regime matched] [--reps 10]

For the fast and keep plans at T=8192, H=2048, V=151936: each kernel's GPU time in one fwd+bwd
(torch.profiler), the fwd+bwd time against the bf16 GEMM timed alternately, the keep plan with a few backward
product configurations (pipeline depth, warps; no bit depends on them), the compiled kernels' registers and
spills, the keep plan's gradient error over every row against fp64 (fp32 delivery) and its bitwise batch
and TP invariance. A probe for choosing and checking, not a record: the bench (tools/bench_operators.py) makes the records.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kernel_times(step, reps: int = 1) -> dict:
    import torch

    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                step()
            torch.cuda.synchronize()
    except Exception as exc:  # the profiler may be refused on the machine: keep the rest of the probe
        return {"error": {"ms": 0.0, "calls": 0, "why": f"{type(exc).__name__}: {exc}"[:300]}}
    out = {}
    for evt in prof.key_averages():
        us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if us:
            out[evt.key[:90]] = {"ms": us / 1e3 / reps, "calls": evt.count // reps}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["ms"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--regime", default="matched")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench, fused_keep, fused_triton, measure
    from harness.operators.bundles import BundleShape
    from harness.operators.impl_fused import fused_forward, fused_forward_backward, keep_fused_backward
    from harness.operators.precision import fp64_gradients
    from harness.operators.regimes import regime_bundle

    rec = bench.environment(torch.device("cuda"))
    out_path = Path(args.out)

    def save():
        out_path.write_text(json.dumps(rec, indent=1, default=str))

    b = regime_bundle(args.regime, BundleShape(args.tokens, 2048, 151936)).to("cuda")
    h, w, t = b.hidden, b.weight, b.targets
    g = torch.randn(h.shape[0], generator=torch.Generator().manual_seed(1)).to("cuda")
    gemm = lambda: h @ w.T  # noqa: E731

    def step_for(plan, config=None):
        def step():
            if plan == "keep":
                kept = []
                logp, lse = fused_forward(h, w, t, 1.0, 1, kept=kept)
                return keep_fused_backward(h, w, t, logp, lse, kept, 1.0, g, 1, config=config)
            return fused_forward_backward(h, w, t, 1.0, g, 1, plan=plan)

        return step

    rec["plans"] = {}
    for plan in ("fast", "keep"):
        step = step_for(plan)
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        ms, gms = measure.time_ms_paired(step, gemm, torch.device("cuda"), 1, args.reps)
        rec["plans"][plan] = {"fwd_bwd_ms": ms, "gemm_ms": gms, "x_gemm": ms / gms, "kernels": kernel_times(step)}
        print(f"{plan}: fwd+bwd {ms:.2f} ms = {ms / gms:.3f}x GEMM ({gms:.2f} ms)", flush=True)
        for k, v in list(rec["plans"][plan]["kernels"].items())[:8]:
            print(f"   {v['ms']:8.3f} ms x{v['calls']:<4d} {k}", flush=True)
        save()
    fwd_fast = lambda: fused_forward(h, w, t, 1.0, 1)  # noqa: E731
    fwd_keep = lambda: fused_forward(h, w, t, 1.0, 1, kept=[])  # noqa: E731
    for name, fn in (("fwd_fast", fwd_fast), ("fwd_keep", fwd_keep)):
        ms, gms = measure.time_ms_paired(fn, gemm, torch.device("cuda"), 2, args.reps)
        rec[name] = {"ms": ms, "gemm_ms": gms, "x_gemm": ms / gms}
        print(f"{name}: {ms:.3f} ms = {ms / gms:.3f}x GEMM", flush=True)
    rec["keep_forward_bits_equal_fast"] = bool(torch.equal(fwd_fast()[0], fwd_keep()[0]))
    print("keep forward = fast forward bitwise:", rec["keep_forward_bits_equal_fast"], flush=True)
    base = fused_triton.BACKWARD_CONFIG
    rec["keep_configs"] = []
    for cfg in (
        replace(base, num_stages=4, hidden_stages=4),
        replace(base, num_stages=4, hidden_stages=3),
        replace(base, num_stages=3, hidden_stages=4),
    ):
        try:
            step = step_for("keep", cfg)
            step()
            ms, gms = measure.time_ms_paired(step, gemm, torch.device("cuda"), 1, args.reps)
            row = {"config": cfg.as_dict(), "fwd_bwd_ms": ms, "gemm_ms": gms, "x_gemm": ms / gms, "kernels": kernel_times(step)}
            print(f"keep {cfg.num_warps}w s{cfg.num_stages} / h s{cfg.hidden_stages}: {ms / gms:.3f}x", flush=True)
        except Exception as exc:
            row = {"config": cfg.as_dict(), "error": f"{type(exc).__name__}: {exc}"[:500]}
            print("config failed", row["error"], flush=True)
        rec["keep_configs"].append(row)
        save()
    regs = {}
    for name, fn in (
        ("partials_dtma", fused_triton._partials_kernel_dtma),
        ("partials_keep", fused_keep._partials_keep_kernel),
        ("keep_convert", fused_keep._keep_convert_kernel),
        ("grad_weight", fused_triton._grad_weight_kernel),
        ("grad_hidden", fused_triton._grad_hidden_kernel),
    ):
        try:
            for dev_cache in fn.device_caches.values():
                for k in dev_cache[0].values():
                    regs.setdefault(name, []).append({"n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None)})
        except Exception as exc:
            regs[name] = f"{type(exc).__name__}: {exc}"
    rec["registers"] = regs
    print("registers/spills:", regs, flush=True)
    save()
    ref_h, ref_w = fp64_gradients(h, w, t, 1.0, g)
    rel = lambda a, r: float((a.double() - r).norm() / r.norm())  # noqa: E731
    acc = {}
    for plan in ("fast", "keep"):
        gh, gw = fused_forward_backward(h, w, t, 1.0, g, 1, torch.float32, plan)
        acc[plan] = {"grad_rel_err_hidden_fp32": rel(gh, ref_h), "grad_rel_err_weight_fp32": rel(gw, ref_w)}
        if plan == "keep":
            for tp in (2, 8):
                th, tw = fused_forward_backward(h, w, t, 1.0, g, tp, torch.float32, plan)
                acc[plan][f"tp{tp}_bitwise"] = bool(torch.equal(th, gh) and torch.equal(tw, gw))
            ah, _ = fused_forward_backward(h[1:518], w, t[1:518], 1.0, g[1:518], 1, torch.float32, plan)
            acc[plan]["batch_rows_1_517_bitwise"] = bool(torch.equal(ah, gh[1:518]))
            again = fused_forward_backward(h, w, t, 1.0, g, 1, torch.float32, plan)
            acc[plan]["deterministic"] = bool(torch.equal(again[0], gh) and torch.equal(again[1], gw))
        print(plan, acc[plan], flush=True)
        del gh, gw
    rec["accuracy"] = acc
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
