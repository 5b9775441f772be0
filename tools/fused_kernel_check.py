"""Check and time the fused operator's kernels on one GPU in one process (development record).

    python tools/fused_kernel_check.py --out /tmp/check.json [--configs fp16:2048,bf16:2048]

Forward at every T of the sweep; forward+backward per backward configuration at the largest T:
time vs the bf16 GEMM of the same T, fp32 gradient error vs fp64 autograd on the first 256 rows,
bitwise checks (grad_hidden rows alone vs in the batch, two runs, TP 2/8 emulated vs TP 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", default="256,1024,2048,4096,8192")
    p.add_argument("--configs", default="fp16:2048,bf16:2048,fp16:4096")
    p.add_argument("--hv", default="2048,151936")
    p.add_argument("--skip-main", action="store_true")
    p.add_argument("--profile", action="store_true", help="GPU time per kernel of one fwd+bwd at the largest T (torch.profiler)")
    p.add_argument("--grid-chunks", default="", help="forward experiment: chunk counts, e.g. 8,40,120")
    p.add_argument("--grid-stages", default="3,4")
    p.add_argument("--grid-tokens", default="256,1024,8192")
    p.add_argument("--breakdown", default="", help="backward kernels of one slice: g_dtype:slice:stages:bt:bv,...")
    p.add_argument("--ab", action="store_true", help="forward variants and backward launch plans, each paired with the GEMM")
    p.add_argument(
        "--ab-variants",
        default="tma_flatten:3,tma_flatten:4,tma_flatten_ws:3",
        help="variant:stages[:field=value/field=value] over KernelConfig, e.g. dtma_flatten:3:exp2=1/block_v=128/num_warps=4",
    )
    p.add_argument("--host", action="store_true", help="host microseconds to issue each piece of one forward call (GPU kept busy)")
    p.add_argument("--plans", default="", help="fwd+bwd per backward plan, key=value;... separated by '|', with GPU time per kernel")
    p.add_argument("--kernel-stats", action="store_true", help="registers, spills and shared memory of every kernel compiled by this run")
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench, measure
    from harness.operators import fused_triton as ft
    from harness.operators.bundles import BundleShape, synthetic_bundle
    from harness.operators.impl_fused import fused_backward, fused_forward

    H, V = (int(x) for x in args.hv.split(","))
    tokens = [int(x) for x in args.tokens.split(",")]
    dev = torch.device("cuda")
    big = synthetic_bundle(BundleShape(max(tokens), H, V)).to(dev)
    rec = {"env": bench.environment(dev), "forward": [], "backward": []}

    def save():
        Path(args.out).write_text(json.dumps(rec, indent=1, default=str))

    if args.grid_chunks:
        forward_grid(
            big,
            rec,
            [int(x) for x in args.grid_tokens.split(",")],
            [int(x) for x in args.grid_chunks.split(",")],
            [int(x) for x in args.grid_stages.split(",")],
        )
        save()
    if args.breakdown:
        T = max(tokens)
        h, w, t = big.hidden[:T], big.weight, big.targets[:T]
        lse = fused_forward(h, w, t, 1.0, 1)[1]
        cfgs = []
        for spec in args.breakdown.split(","):
            gd, sl, st, bt, bv = spec.split(":")
            cfgs.append(replace(ft.BACKWARD_CONFIG, g_dtype=gd, slice_cols=int(sl), num_stages=int(st), block_t=int(bt), block_v=int(bv)))
        kernel_breakdown(h, w, t, lse, torch.randn(T, device=dev), rec, cfgs)
        save()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        T = max(tokens)
        h, w, t = big.hidden[:T], big.weight, big.targets[:T]
        g_out = torch.randn(T, device=dev)

        def fwd_bwd():
            logp, lse = fused_forward(h, w, t, 1.0, 1)
            return fused_backward(h, w, t, lse, 1.0, g_out, 1)

        fwd_bwd()
        torch.cuda.synchronize()
        # five calls back to back, as the bench times them (alternating with a GEMM): kernel time vs the
        # span each call occupies on the GPU (idle gaps = host time the GPU waited for)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fwd_bwd()
                torch.cuda.synchronize()
                _ = h @ w.T
                torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=12)
        print(table)
        rec["profile_table"] = table
        rec["profile_calls"] = gpu_spans(prof)
        print("spans", rec["profile_calls"], flush=True)
        save()
    if args.host:
        host_breakdown(big, rec, tokens)
        save()
    if args.plans:
        T = max(tokens)
        plan_ab(big.hidden[:T], big.weight, big.targets[:T], rec, save, args.plans.split("|"))
    if args.ab:
        ab_check(big, rec, tokens, [tuple(v.split(":", 2)) for v in args.ab_variants.split(",")], save)
        save()
    if args.kernel_stats:
        rec["kernel_stats"] = kernel_stats()
        print("kernel stats", *rec["kernel_stats"], sep="\n", flush=True)
        save()
    if args.skip_main:
        return 0
    for T in tokens:
        h, w, t = big.hidden[:T], big.weight, big.targets[:T]
        gemm = measure.time_ms(lambda: h @ w.T, dev, 3, 10)
        fwd = measure.time_ms(lambda: fused_forward(h, w, t, 1.0, 1), dev, 3, 10)
        full = fused_forward(h, w, t, 1.0, 1)[0]
        n = min(517, T - 1)
        alone = fused_forward(h[1 : 1 + n], w, t[1 : 1 + n], 1.0, 1)[0]
        tp_ok = all(torch.equal(fused_forward(h, w, t, 1.0, tp)[0], full) for tp in (2, 8))
        row = {"T": T, "gemm_ms": gemm, "fwd_ms": fwd, "x_gemm": fwd / gemm, "batch_inv": bool(torch.equal(alone, full[1 : 1 + n])), "tp_inv": tp_ok}
        rec["forward"].append(row)
        print("fwd", row, flush=True)
        save()

    T = max(tokens)
    h, w, t = big.hidden[:T], big.weight, big.targets[:T]
    gemm = measure.time_ms(lambda: h @ w.T, dev, 3, 10)
    gen = torch.Generator().manual_seed(1)
    g_out = torch.randn(T, generator=gen).to(dev)
    # fp64 reference gradients on the first 256 rows
    r = 256
    h64, w64 = h[:r].double().requires_grad_(), w.double().requires_grad_()
    lp = torch.log_softmax(h64 @ w64.T, dim=-1).gather(1, t[:r, None]).squeeze(1)
    (lp * g_out[:r].double()).sum().backward()
    ref_h, ref_w = h64.grad, w64.grad
    del h64, w64, lp
    torch.cuda.empty_cache()

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())

    for spec in args.configs.split(","):
        gd, sl, st = (spec.split(":") + ["3"])[:3]
        ft.BACKWARD_CONFIG = replace(ft.BACKWARD_CONFIG, g_dtype=gd, slice_cols=int(sl), num_stages=int(st))
        row = {"config": ft.BACKWARD_CONFIG.as_dict()}
        try:

            def fwd_bwd():
                logp, lse = fused_forward(h, w, t, 1.0, 1)
                return fused_backward(h, w, t, lse, 1.0, g_out, 1)

            row["fwd_bwd_ms"] = measure.time_ms(fwd_bwd, dev, 2, 5)
            row["gemm_ms_adjacent"] = gemm_now = measure.time_ms(lambda: h @ w.T, dev, 3, 10)
            row["fwd_bwd_x_gemm"] = row["fwd_bwd_ms"] / gemm_now
            lse = fused_forward(h, w, t, 1.0, 1)[1]
            row["bwd_ms"] = measure.time_ms(lambda: fused_backward(h, w, t, lse, 1.0, g_out, 1), dev, 2, 5)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            gh, gw = fwd_bwd()
            torch.cuda.synchronize()
            row["peak_extra_bytes_beyond_grads"] = torch.cuda.max_memory_allocated() - base - gh.numel() * 2 - gw.numel() * gw.element_size()
            gh2, gw2 = fwd_bwd()
            row["deterministic"] = bool(torch.equal(gh, gh2) and torch.equal(gw, gw2))
            del gh2, gw2
            n = 517
            lse_a = fused_forward(h[1 : 1 + n], w, t[1 : 1 + n], 1.0, 1)[1]
            gh_a, _ = fused_backward(h[1 : 1 + n], w, t[1 : 1 + n], lse_a, 1.0, g_out[1 : 1 + n], 1)
            row["grad_h_batch_inv"] = bool(torch.equal(gh_a, gh[1 : 1 + n]))
            del gw
            for tp in (2, 8):
                gh_t, gw_t = fused_backward(h, w, t, lse, 1.0, g_out, tp)
                _, gw1 = fused_backward(h, w, t, lse, 1.0, g_out, 1)
                row[f"grad_tp{tp}_inv"] = bool(torch.equal(gh_t, gh) and torch.equal(gw_t, gw1))
                del gh_t, gw_t, gw1
            lse_r = fused_forward(h[:r], w, t[:r], 1.0, 1)[1]
            gh_r, gw_r = fused_backward(h[:r], w, t[:r], lse_r, 1.0, g_out[:r], 1, torch.float32)
            row["grad_rel_err_hidden_fp32"] = rel(gh_r, ref_h)
            row["grad_rel_err_weight_fp32"] = rel(gw_r, ref_w)
            row["grad_rel_err_hidden_bf16"] = rel(gh_r.bfloat16(), ref_h)
            row["grad_rel_err_weight_bf16"] = rel(gw_r.bfloat16(), ref_w)
            # the slice width must change no bit: compare with 1024-column slices
            saved = ft.BACKWARD_CONFIG
            ft.BACKWARD_CONFIG = replace(saved, slice_cols=1024)
            gh_s, gw_s = fused_backward(h, w, t, lse, 1.0, g_out, 1)
            ft.BACKWARD_CONFIG = saved
            gh_n, gw_n = fused_backward(h, w, t, lse, 1.0, g_out, 1)
            row["slice_width_changes_no_bit"] = bool(torch.equal(gh_s, gh_n) and torch.equal(gw_s, gw_n))
            del gh_r, gw_r, gh, gh_s, gw_s, gh_n, gw_n
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        torch.cuda.empty_cache()
        rec["backward"].append(row)
        print("bwd", row, flush=True)
        save()
    return 0


def ab_check(big, rec: dict, tokens, variants, save) -> None:
    """Forward kernel variants at each T, each timed alternately with the bf16 GEMM of the same T (the
    card's clock drifts), with bitwise checks and the host time to issue one call."""
    from dataclasses import fields, replace

    import torch

    from harness.operators import fused_triton as ft
    from harness.operators import measure
    from harness.operators.fused_plan import chunk_bounds
    from harness.operators.impl_reference import reference_logprobs
    from harness.operators.sweep import _fused

    dev = big.hidden.device
    types = {f.name: f.type for f in fields(ft.KernelConfig)}
    conv = {"int": int, "str": str, "bool": lambda x: x in ("1", "true", "True")}
    for T in tokens:
        h, w, t = big.hidden[:T], big.weight, big.targets[:T]
        bounds = chunk_bounds(w.shape[0])
        ref64 = reference_logprobs(h, w, t, 1.0)
        base = None
        for spec in variants:
            variant, stages, extra = (*spec, "")[:3]
            kv = dict(x.split("=") for x in extra.split("/") if x)
            cfg = replace(ft.HOPPER_CONFIG, variant=variant, num_stages=int(stages), **{k: conv[types[k]](v) for k, v in kv.items()})
            row = {"T": T, "variant": variant, "stages": int(stages), "config": cfg.as_dict()}
            try:
                full = _fused(h, w, t, cfg)
                row["max_abs_err"] = float((full.double() - ref64).abs().max())
                n = min(517, T - 1)
                row["batch_inv"] = bool(torch.equal(_fused(h[1 : 1 + n], w, t[1 : 1 + n], cfg), full[1 : 1 + n]))
                row["tp8_inv"] = bool(torch.equal(_fused(h, w, t, cfg, tp=8), full))
                base = full if base is None else base
                row["max_diff_vs_first"] = float((full - base).abs().max())
                call = lambda: ft.triton_merge(*ft.triton_partials(h, w, t, bounds, 1.0, cfg))  # noqa: E731
                row["ms"], row["gemm_ms"] = measure.time_ms_paired(call, lambda: h @ w.T, dev, 3, 10)
                row["x_gemm"] = row["ms"] / row["gemm_ms"]
                # host time to issue one call while the GPU is busy (what an idle GPU waits for)
                torch.cuda._sleep(200_000_000)
                import time

                t0 = time.perf_counter()
                for _ in range(20):
                    call()
                row["host_us_per_call"] = (time.perf_counter() - t0) / 20 * 1e6
                torch.cuda.synchronize()
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rec.setdefault("ab_forward", []).append(row)
            print("ab fwd", row, flush=True)
            save()


def kernel_stats() -> list[dict]:
    """Per compiled kernel of this process: registers per thread, spilled registers, shared memory, launch
    options and constexprs (what decides how many programs share a multiprocessor)."""
    from harness.operators import fused_triton as ft

    compiled = [(ft._partials_kernel_dtma.__name__, k) for k in ft._launch_partials_dtma.compiled.values()]
    for fn in (ft._partials_kernel_dtma, ft._grad_logits_kernel, ft._grad_weight_kernel, ft._grad_hidden_kernel, ft._merge_kernel):
        for caches in getattr(fn, "device_caches", {}).values():
            compiled += [(fn.__name__, k) for k in caches[0].values()]
    out, seen = [], set()
    for name, k in compiled:
        md = k.metadata
        consts = {str(a): b for a, b in getattr(k.src, "constants", {}).items() if isinstance(b, (int, bool))} if hasattr(k, "src") else {}
        row = {"kernel": name, "regs": k.n_regs, "spills": k.n_spills, "shared": md.shared, "warps": md.num_warps, "stages": md.num_stages}
        row["maxnreg"], row["constexprs"] = getattr(md, "maxnreg", None), consts
        key = repr(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def gpu_spans(prof) -> list[dict]:
    """Per fwd+bwd call in a profile (calls separated by the GEMM, 'gemm' below): milliseconds from its
    first kernel's start to its last kernel's end, and the kernels' own time inside that span."""
    import json
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    calls, cur = [], []
    for e in kernels:
        if any(k in e["name"].lower() for k in ("gemm", "cutlass", "nvjet", "xmma")):  # cuBLAS's kernel names
            if cur:
                calls.append(cur)
            calls.append([e])
            cur = []
        else:
            cur.append(e)
    if cur:
        calls.append(cur)
    out = []
    for c in calls:
        span = (c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"]) / 1e3
        busy = sum(e["dur"] for e in c) / 1e3
        out.append({"kind": "gemm" if len(c) == 1 else "fwd_bwd", "kernels": len(c), "span_ms": round(span, 3), "kernel_ms": round(busy, 3)})
    return out


def host_breakdown(big, rec: dict, tokens) -> None:
    """Host time per piece of one forward call while the GPU is busy: what an idle GPU waits for at
    the start of a call (a 1 ms kernel at T=1024 makes 100 us of it 10% of the time)."""
    import time

    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from harness.operators import fused_triton as ft
    from harness.operators import registry
    from harness.operators.contract import _check_operands
    from harness.operators.fused_plan import chunk_bounds, shard_chunk_bounds
    from harness.operators.impl_fused import fused_forward

    T = min(tokens)
    h, w, t = big.hidden[:T], big.weight, big.targets[:T]
    bounds = chunk_bounds(w.shape[0])
    parts = ft.triton_partials(h, w, t, bounds, 1.0)
    host_tma = replace(ft.HOPPER_CONFIG, variant="tma_flatten")
    dev_tma = replace(ft.HOPPER_CONFIG, variant="dtma_flatten")
    op = registry.get("fused-linear-logprob")
    flag = torch.zeros(2, dtype=torch.int32, pin_memory=True)
    pieces = {
        "shard_chunk_bounds": lambda: shard_chunk_bounds(w.shape[0], 1, 0),
        "bounds_tensor": lambda: ft._bounds_tensor(tuple(bounds), h.device),
        "two_descriptors": lambda: (TensorDescriptor.from_tensor(h, [128, 64]), TensorDescriptor.from_tensor(w, [256, 64])),
        "triton_partials (tma_flatten: descriptors encoded on the host)": lambda: ft.triton_partials(h, w, t, bounds, 1.0, host_tma),
        "triton_partials (dtma_flatten: descriptors made on the device)": lambda: ft.triton_partials(h, w, t, bounds, 1.0, dev_tma),
        "triton_partials (default)": lambda: ft.triton_partials(h, w, t, bounds, 1.0),
        "triton_merge with the range check": lambda: ft.triton_merge(*parts, t, w.shape[0], flag),
        "operator call (selected_logprobs, range checked in the merge)": lambda: op.selected_logprobs(h, w, t, 1.0),
        "triton_merge": lambda: ft.triton_merge(*parts),
        "fused_forward": lambda: fused_forward(h, w, t, 1.0, 1),
        "operand checks (before launch)": lambda: _check_operands(h, w, t, 1.0, 1, check_targets=False),
        "torch bf16 GEMM": lambda: h @ w.T,
    }
    out = {"T": T}
    for name, fn in pieces.items():
        fn()
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000_000)  # keeps the GPU busy, so only host time is counted
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        out[name] = round((time.perf_counter() - t0) / 20 * 1e6, 1)
        torch.cuda.synchronize()
    rec["host_us"] = out
    print("host", out, flush=True)


def plan_ab(h, w, t, rec: dict, save, plans) -> None:
    """fwd+bwd per backward plan (key=value;... over BackwardConfig), timed alternately with the GEMM,
    with the GPU time per kernel of one call (torch.profiler) and bitwise equality to the first plan."""
    from dataclasses import fields, replace

    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.operators import fused_triton as ft
    from harness.operators import measure
    from harness.operators.impl_fused import fused_backward, fused_forward

    types = {f.name: f.type for f in fields(ft.BackwardConfig)}
    conv = {"int": int, "str": str, "bool": lambda x: x in ("1", "true", "True")}
    g_out = torch.randn(h.shape[0], generator=torch.Generator().manual_seed(1)).to(h.device)
    saved, first = ft.BACKWARD_CONFIG, None
    for spec in plans:
        kv = dict(x.split("=") for x in spec.split(";") if x)
        cfg = replace(saved, **{k: conv[types[k]](v) for k, v in kv.items()})
        ft.BACKWARD_CONFIG = cfg
        row = {"plan": spec, "T": h.shape[0]}

        def fwd_bwd():
            logp, lse = fused_forward(h, w, t, 1.0, 1)
            return fused_backward(h, w, t, lse, 1.0, g_out, 1)

        try:
            gh, gw = fwd_bwd()
            torch.cuda.synchronize()
            if first is None:
                first = (gh, gw)
            else:
                row["bitwise_equal_to_first"] = bool(torch.equal(gh, first[0]) and torch.equal(gw, first[1]))
            del gh, gw
            row["fwd_bwd_ms"], row["gemm_ms"] = measure.time_ms_paired(fwd_bwd, lambda: h @ w.T, h.device, 2, 5)
            row["fwd_bwd_x_gemm"] = row["fwd_bwd_ms"] / row["gemm_ms"]
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fwd_bwd()
                torch.cuda.synchronize()
            per = {}
            for e in prof.key_averages():
                if e.device_time_total > 0:
                    per[e.key[:60]] = round(e.device_time_total / 1e3, 3)
            row["gpu_ms_per_kernel"] = per
            row["gpu_ms_total"] = round(sum(per.values()), 3)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            gh, gw = fwd_bwd()
            torch.cuda.synchronize()
            row["peak_extra_MiB_beyond_bf16_grads"] = (torch.cuda.max_memory_allocated() - base - gh.numel() * 2 - gw.numel() * 2) / 2**20
            del gh, gw
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        torch.cuda.empty_cache()
        rec.setdefault("plans", []).append(row)
        print("plan", row, flush=True)
        save()
    ft.BACKWARD_CONFIG = saved


def kernel_breakdown(h, w, t, lse, g_out, out: dict, configs) -> None:
    """Time one vocab slice's three backward kernels alone, per configuration (x slices = the backward)."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from harness.operators import fused_triton as ft
    from harness.operators import measure

    rows, width = h.shape
    for cfg in configs:
        bt, bv, bk = cfg.block_t, cfg.block_v, cfg.block_k
        gd = ft._G_DTYPES[cfg.g_dtype]
        n = cfg.slice_cols
        g_buf = torch.empty(rows, n, dtype=gd, device=h.device)
        hc = h.to(gd)
        wc = w[:n].to(gd)
        gw = torch.empty(n, width, dtype=w.dtype, device=h.device)
        part = torch.empty(rows, width, dtype=torch.float32, device=h.device)
        scale = g_out.float()
        opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        k1 = lambda: ft._grad_logits_kernel[(triton.cdiv(rows, bt), triton.cdiv(n, bv))](  # noqa: E731
            TensorDescriptor.from_tensor(h, [bt, bk]),
            TensorDescriptor.from_tensor(w, [bv, bk]),
            g_buf,
            w,
            wc,
            t,
            lse,
            scale,
            rows,
            width,
            0,
            n,
            g_buf.stride(0),
            w.stride(0),
            1.0,
            triton.cdiv(rows, bt),
            COPY_W=False,
            BLOCK_T=bt,
            BLOCK_V=bv,
            BLOCK_K=bk,
            BLOCK_C=64,
            **opts,
        )
        k2 = lambda: ft._grad_weight_kernel[(triton.cdiv(n, bt), width // bv)](  # noqa: E731
            TensorDescriptor.from_tensor(g_buf, [bk, bt]),
            TensorDescriptor.from_tensor(hc, [bk, bv]),
            gw,
            rows,
            width,
            n,
            gw.stride(0),
            BLOCK_V=bt,
            BLOCK_H=bv,
            BLOCK_K=bk,
            **opts,
        )
        k3 = lambda: ft._grad_hidden_kernel[(triton.cdiv(rows, bt), width // bv)](  # noqa: E731
            TensorDescriptor.from_tensor(g_buf, [bt, bk]),
            TensorDescriptor.from_tensor(wc, [bk, bv]),
            part,
            rows,
            width,
            0,
            n,
            ACCUMULATE=True,
            BLOCK_T=bt,
            BLOCK_H=bv,
            BLOCK_K=bk,
            **opts,
        )
        conv = lambda: w[:n].to(gd)  # noqa: E731
        row = {"config": cfg.as_dict()}
        try:
            gemm_slice = measure.time_ms(lambda: h @ w[:n].T, h.device, 3, 20)
            row.update(
                gemm_slice_ms=gemm_slice,
                k1_ms=measure.time_ms(k1, h.device, 3, 20),
                k2_ms=measure.time_ms(k2, h.device, 3, 20),
                k3_ms=measure.time_ms(k3, h.device, 3, 20),
                conv_ms=measure.time_ms(conv, h.device, 3, 20),
            )
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out.setdefault("breakdown", []).append(row)
        print("slice", row, flush=True)


def forward_grid(big, out: dict, tokens, chunk_counts, stages) -> None:
    """Forward time vs the GEMM for other chunk counts and pipeline depths (the plan's choice)."""
    from dataclasses import replace

    from harness.operators import fused_triton as ft
    from harness.operators import measure

    for T in tokens:
        h, w, t = big.hidden[:T], big.weight, big.targets[:T]
        gemm = measure.time_ms(lambda: h @ w.T, h.device, 3, 10)
        for n_chunks in chunk_counts:
            bounds = [(c * w.shape[0]) // n_chunks for c in range(n_chunks + 1)]
            for st in stages:
                cfg = replace(ft.HOPPER_CONFIG, num_stages=st)
                call = lambda: ft.triton_merge(*ft.triton_partials(h, w, t, bounds, 1.0, cfg))  # noqa: E731
                kern = lambda: ft.triton_partials(h, w, t, bounds, 1.0, cfg)  # noqa: E731
                row = {"T": T, "chunks": n_chunks, "stages": st, "gemm_ms": gemm}
                try:
                    row["ms"] = measure.time_ms(call, h.device, 3, 10)
                    row["kernel_ms"] = measure.time_ms(kern, h.device, 3, 10)
                    row["x_gemm"] = row["ms"] / gemm
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                out.setdefault("forward_grid", []).append(row)
                print("grid", row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
