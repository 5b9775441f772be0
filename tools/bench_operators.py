"""Operator bench CLI: measure every available selected-logprob operator, write JSON, print a table.

    python tools/bench_operators.py --device cuda --shape production --regime matched --out reports/bench/h200-peers-matched.json
    python tools/bench_operators.py --device cpu --shape 256,256,4096 --out /tmp/cpu.json
    python tools/bench_operators.py --device cuda --bundle dumps/probe_3.pt --out /tmp/capture.json
    python tools/bench_operators.py --device cuda --shape production --regime high-entropy --precision --grad-scale 1.2207e-4 --out /tmp/p.json
    python tools/bench_operators.py --device cuda --megatron-step --out reports/bench/h200-megatron-step.json

--shape is ``production`` (T=8192, H=2048, V=151936), ``small`` (T=256, H=256, V=4096) or T,H,V.
--regime picks the synthetic inputs (harness/operators/regimes.py); --bundle reads a captured bundle
(an embedded run's probe_N.pt, or safetensors with hidden, weight, targets). Every record holds the
inputs' measured statistics (entropy, target probability, logit spread) beside each row.
--precision: each backward plan's gradient error over every row against fp64, in bf16 and fp32, with its
cost (harness/operators/precision.py). --megatron-step: a megatron-core GPTModel training step with its
log-prob path native, fused and Cut Cross-Entropy (harness/operators/megatron_step.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"production": (8192, 2048, 151936), "small": (256, 256, 4096)}


def parse_shape(text: str) -> tuple[int, int, int]:
    if text in SHAPES:
        return SHAPES[text]
    try:
        t, h, v = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape: expected 'production', 'small' or T,H,V integers; got {text!r}") from None
    return t, h, v


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cpu")
    p.add_argument("--shape", type=parse_shape, default=SHAPES["small"])
    p.add_argument("--bundle", help="probe bundle (safetensors: hidden, weight, targets) instead of a synthetic one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--names", help="comma-separated operator names (default: all registered)")
    p.add_argument("--out", required=True, help="JSON record path, e.g. reports/bench/h200-peers-matched.json")
    p.add_argument("--markdown", help="also write the table as markdown to this path")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, help="calls of each side per timing (default: bench.DEFAULT_REPS, 100 on cuda, 10 on cpu)")
    p.add_argument("--sweep", action="store_true", help="also time the fused kernel's candidate configs (cuda)")
    p.add_argument("--tokens", help="comma-separated T values: one bench per T (same H, V, seed), rows of all in one record")
    p.add_argument("--regime", default="default", help="synthetic inputs: default, matched, high-entropy, peaked, flat (regimes.py)")
    p.add_argument("--precision", action="store_true", help="gradient error of each backward plan over every row vs fp64, with its cost")
    p.add_argument("--grad-scale", type=float, default=1.0, help="--precision: grad_out ~ N(0,1) times this (a mean loss over N tokens: 1/N)")
    p.add_argument("--megatron-step", action="store_true", help="a megatron-core GPT training step, log-prob path native / fused / CCE")
    p.add_argument("--megatron-shape", default="2,2048,151936,2,2048", help="layers,H,V,batch,seq for --megatron-step")
    p.add_argument("--from-logits", action="store_true", help="the selected log-prob from given logits vs its bandwidth floor and the natives (cuda)")
    p.add_argument("--logits-dtypes", default="bfloat16,float32", help="--from-logits: logits dtypes (each at every --tokens value)")
    p.add_argument("--precision-plans", help="--precision: comma-separated plan:dtype pairs (default: every plan in bf16 and fp32)")
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench, registry, render
    from harness.operators.bundles import BundleError, BundleShape, load_bundle
    from harness.operators.regimes import RegimeError, regime_bundle

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_operators: --device cuda, but torch sees no CUDA device here", file=sys.stderr)
        return 2
    if args.megatron_step:
        return megatron_step(args)
    try:
        bundle = load_bundle(args.bundle) if args.bundle else regime_bundle(args.regime, BundleShape(*args.shape, seed=args.seed))
    except (BundleError, RegimeError) as exc:
        print(f"bench_operators: {exc}", file=sys.stderr)
        return 2
    regime = "capture" if args.bundle else args.regime
    if args.precision:
        return precision(args, bundle, regime)
    if args.from_logits:
        return from_logits(args, regime)
    names = args.names.split(",") if args.names else None
    unknown = [n for n in names or [] if n not in registry.names()]
    if unknown:
        print(f"bench_operators: unknown operator(s) {unknown}; registered: {registry.names()}", file=sys.stderr)
        return 2

    def progress(row):
        print(
            f"measured {row['name']}: "
            + ", ".join(
                f"{k}={row.get(k)}"
                for k in ("max_abs_err", "batch_invariant", "tp_invariant", "ms_median", "error", "why_unavailable")
                if row.get(k) is not None
            ),
            flush=True,
        )

    if args.tokens:
        try:
            tokens = [int(x) for x in args.tokens.split(",")]
        except ValueError:
            print(f"bench_operators: --tokens: expected comma-separated integers; got {args.tokens!r}", file=sys.stderr)
            return 2
        t, h, v = args.shape
        bundles = [regime_bundle(args.regime, BundleShape(n, h, v, seed=args.seed)) for n in tokens]
        record = bench.run_token_sweep(
            bundles, args.device, names, args.temperature, args.warmup, args.reps, out_path=args.out, on_row=progress, regime=regime
        )
    else:
        record = bench.run_bench(
            bundle, args.device, names, args.temperature, args.warmup, args.reps, out_path=args.out, on_row=progress, regime=regime
        )
    if args.sweep and args.device == "cuda":
        from harness.operators.impl_reference import reference_logprobs
        from harness.operators.sweep import sweep

        b = bundle.to("cuda")
        ref = reference_logprobs(b.hidden, b.weight, b.targets, args.temperature)

        def keep(rows):  # a config that hangs or crashes must not lose the ones before it
            record["fused_sweep"] = rows
            bench.write_record(record, args.out)

        keep(sweep(b, ref, record["gemm_ms_median"], on_row=keep))
    render.print_table(record)
    if args.markdown:
        Path(args.markdown).write_text(render.markdown(record))
    return 0


def _header(device) -> dict:
    import datetime as dt

    import torch

    from harness.operators import bench

    return {"created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **bench.environment(torch.device(device))}


def precision(args, bundle, regime) -> int:
    from harness.operators import bench
    from harness.operators.precision import gradient_precision
    from harness.operators.regimes import input_stats

    b = bundle.to(args.device)
    record = _header(args.device) | {
        "bundle": {"source": b.source, **b.shape},
        "regime": regime,
        "input_stats": input_stats(b.hidden, b.weight, b.targets, args.temperature),
    }
    plans = {}
    if args.precision_plans:
        import torch

        plans["plans"] = tuple((p.split(":")[0], getattr(torch, p.split(":")[1])) for p in args.precision_plans.split(","))
    record |= gradient_precision(b, args.temperature, warmup=max(1, args.warmup - 1), reps=args.reps or 10, grad_scale=args.grad_scale, **plans)
    bench.write_record(record, args.out)
    for r in record["plans"]:
        if "error" in r:
            print(f"{r['plan']:5s} grads in {r['grad_dtype']:8s}: {r['error']}")
            continue
        print(
            f"{r['plan']:5s} grads in {r['grad_dtype']:8s}: rel err h {r['grad_rel_err_hidden']:.2e} W {r['grad_rel_err_weight']:.2e}; "
            f"fwd+bwd {r['fwd_bwd_ms_median']:.2f} ms = {r['fwd_bwd_x_gemm']:.2f}x GEMM; peak extra {(r['peak_extra_bytes'] or 0) / 2**20:.0f} MiB"
        )
    return 0


def from_logits(args, regime) -> int:
    import torch

    from harness.operators import bench
    from harness.operators.bundles import BundleShape
    from harness.operators.from_logits_bench import from_logits_rows
    from harness.operators.regimes import input_stats, regime_bundle

    if args.device != "cuda":
        print("bench_operators: --from-logits times GPU kernels; run it with --device cuda", file=sys.stderr)
        return 2
    _, h, v = args.shape
    tokens = [int(x) for x in (args.tokens or "4096,8192").split(",")]
    dtypes = [getattr(torch, d) for d in args.logits_dtypes.split(",")]
    # "stages", not "results": its rows are stages of a from-logits operator, not linear-logprob operators against the GEMM
    record = _header(args.device) | {"regime": regime, "method": from_logits_method(), "stages": [], "input_stats": {}}
    for n in tokens:
        b = regime_bundle(args.regime, BundleShape(n, h, v, seed=args.seed)).to("cuda")
        record["input_stats"][str(n)] = input_stats(b.hidden, b.weight, b.targets, args.temperature)
        for dtype in dtypes:
            for row in from_logits_rows(b, dtype, reps=args.reps or 50):
                record["stages"].append(row)
                bench.write_record(record, args.out)
                f, fb = row["fwd"], row["fwd_bwd"]
                print(
                    f"T={n} {str(dtype).removeprefix('torch.'):8s} {row['name']:9s} fwd {f['ms_median_queued']:.3f} ms = {f['x_floor_queued']:.2f}x floor "
                    f"({f['achieved_gbps_queued']:.0f} GB/s, copy {f['copy_gbps']:.0f}); fwd+bwd {fb['ms_median_queued']:.3f} ms = {fb['x_floor_queued']:.2f}x"
                    + (f"; bwd {row['bwd']['ms_median_queued']:.3f} ms = {row['bwd']['x_floor_queued']:.2f}x" if "bwd" in row else "")
                    + f"; max err {row['max_abs_err']:.1e}, grad rel {row['grad_rel_err']:.1e}, batch inv {row['batch_invariant']}/{row['grad_batch_invariant']}",
                    flush=True,
                )
        del b
        torch.cuda.empty_cache()
    return 0


def from_logits_method() -> str:
    from harness.operators import from_logits_bench

    return " ".join(from_logits_bench.__doc__.split())


def megatron_step(args) -> int:
    from harness.operators import bench
    from harness.operators.megatron_step import megatron_step_record

    try:
        layers, h, v, batch, seq = (int(x) for x in args.megatron_shape.split(","))
    except ValueError:
        print(f"bench_operators: --megatron-shape: expected layers,H,V,batch,seq integers; got {args.megatron_shape!r}", file=sys.stderr)
        return 2
    names = args.names.split(",") if args.names else None
    record = _header(args.device) | megatron_step_record(args.device, layers, h, v, batch, seq, reps=args.reps or 10, warmup=args.warmup, paths=names)
    bench.write_record(record, args.out)
    for r in record["paths"]:
        if not r["available"]:
            print(f"{r['path']}: not measured ({r['why_unavailable']})")
            continue
        peak = r["peak_extra_bytes"]
        print(
            f"{r['path']:18s} step {r['step_ms_median']:8.2f} ms  peak extra {'-' if peak is None else f'{peak / 2**30:.2f} GiB'}  "
            f"loss {r['loss_mean']:.6f} (max err vs fp64 {r.get('loss_max_abs_err_vs_fp64', float('nan')):.1e})  "
            f"grad vs fp32-logits median/max rel {r.get('grad_rel_diff_vs_fp32-logits_median', 0):.1e}/{r.get('grad_rel_diff_vs_fp32-logits_max', 0):.1e}"
        )
    print("LM-head grad batch invariance (rows of sample 0 differing alone vs in batch):", record.get("lm_head_grad_batch_invariance"))
    print("decoder hidden states batch invariant:", record.get("decoder_batch_invariant"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
