"""Issue 16 on one GPU: the fast and the lean backward plan beside Liger and CCE, and repeated forwards.

    python tools/bench_issue16.py --out /tmp/round.json [--tokens 256,1024,2048,4096,8192] [--repeats 5]

(Round 6 ran it as tools/bench_issue16_round6.py; round 7 added queued timing to every row and repeat; round 8
times 100 calls of each side per figure, --reps, where rounds 4-7 timed 10.)

1. Check first (and stop with exit 3 if not met): at T=8192 (4 row chunks) and T=5000 (3, the last one short), the lean plan's gradients are
   bitwise the fast plan's (autograd, TP=1 and TP=2 emulated).
2. The token sweep of tools/bench_operators.py (harness.operators.bench.run_token_sweep) over the named
   operators, every field of the issue per row, each time both from an idle GPU and queued (bench.METHOD).
3. On the card warmed by the sweep: the forward against the GEMM (timed alternately, as the sweep does) at
   --repeat-tokens, --repeats times each, interleaved, idle-start and queued; and fwd+bwd of both plans at T=8192,
   alternately. Each repeat and the median go into the record (``forward_repeats``, ``fwd_bwd_repeats``), with the
   GPU's clocks before and after (nvidia-smi).
4. GPU time per kernel of one fwd+bwd of each plan at T=8192 (torch.profiler, ``profile_8192``; --skip-profile).
5. --lean-variants: the lean plan at T=8192 with one setting changed (``lean_variants``): time, memory, bits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAST, LEAN = "fused-linear-logprob", "fused-linear-logprob-lean"
PEERS = "liger-fused-linear-ce,cut-cross-entropy"
H, V = 2048, 151936


def gpu_state() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def lean_equals_fast(tokens: int) -> dict:
    import torch

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    b = synthetic_bundle(BundleShape(tokens, H, V, seed=0)).to("cuda")
    g = measure._grad_out(tokens, b.hidden.device)
    fast = measure._grads(registry.get(FAST), b.hidden, b.weight, b.targets, 1.0, g)
    out = {}
    for tp in (1, 2):
        lean = measure._grads(registry.get(LEAN), b.hidden, b.weight, b.targets, 1.0, g, tp)
        out[f"tp{tp}"] = {"grad_hidden_equal": bool(torch.equal(lean[0], fast[0])), "grad_weight_equal": bool(torch.equal(lean[1], fast[1]))}
        del lean
    del fast
    torch.cuda.empty_cache()
    return out


def forward_repeats(tokens: list[int], repeats: int, warmup: int, reps: int) -> dict:
    """The forward against the GEMM, timed alternately call by call, ``repeats`` times per T (T interleaved), each
    repeat both ways the sweep times it: from an idle GPU (the span includes the host's time to issue the call), and
    queued (measure.time_ms_paired_queued: the GPU's work alone)."""
    import torch

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    op = registry.get(FAST)
    bundles = {t: synthetic_bundle(BundleShape(t, H, V, seed=0)).to("cuda") for t in tokens}
    runs = {str(t): [] for t in tokens}
    with torch.no_grad():
        for _ in range(repeats):
            for t, b in bundles.items():
                call, gemm = (lambda b=b: op.selected_logprobs(b.hidden, b.weight, b.targets)), (lambda b=b: b.hidden @ b.weight.T)
                runs[str(t)].append(measure.paired_fields(call, gemm, b.hidden.device, warmup, reps))
    return {
        t: {
            "repeats": r,
            "x_gemm_median": statistics.median(x["x_gemm"] for x in r),
            "x_gemm_queued_median": statistics.median(x["x_gemm_queued"] for x in r),
            "x_gemm_queued_max": max(x["x_gemm_queued"] for x in r),
        }
        for t, r in runs.items()
    }


def _print_repeats(repeats: dict) -> None:
    print(
        "forward repeats (idle-start, queued):",
        json.dumps({t: [(round(x["x_gemm"], 3), round(x["x_gemm_queued"], 3)) for x in r["repeats"]] for t, r in repeats.items()}),
        flush=True,
    )


def fwd_bwd_repeats(tokens: int, repeats: int, reps: int) -> dict:
    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    b = synthetic_bundle(BundleShape(tokens, H, V, seed=0)).to("cuda")
    gemm = lambda: b.hidden @ b.weight.T  # noqa: E731
    runs = {FAST: [], LEAN: []}
    for _ in range(repeats):
        for name in runs:
            r = measure.fwd_bwd_time_and_memory(registry.get(name), b, 1.0, 2, reps, gemm)
            runs[name].append(r | {"fwd_bwd_x_gemm": r["fwd_bwd_ms_median"] / r["fwd_bwd_gemm_ms_median"]})
    return {
        n: {
            "repeats": r,
            "fwd_bwd_x_gemm_median": statistics.median(x["fwd_bwd_x_gemm"] for x in r),
            "fwd_bwd_x_gemm_queued_median": statistics.median(x["fwd_bwd_x_gemm_queued"] for x in r),
        }
        for n, r in runs.items()
    }


def lean_variants(specs: str, tokens: int = 8192) -> list[dict]:
    """The lean plan with one setting changed (``row_chunk=4096`` or a BackwardConfig field), its fwd+bwd time, memory
    and bits against the fast plan's gradients, beside the default lean plan timed in the same loop. Leads, not plans."""
    import torch

    import harness.operators.fused_triton as ft
    from harness.operators import fused_plan, measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    b = synthetic_bundle(BundleShape(tokens, H, V, seed=0)).to("cuda")
    g = measure._grad_out(tokens, b.hidden.device)
    fast = measure._grads(registry.get(FAST), b.hidden, b.weight, b.targets, 1.0, g)
    gemm = lambda: b.hidden @ b.weight.T  # noqa: E731
    default_cfg, default_chunk = ft.BACKWARD_CONFIG, fused_plan.LEAN_ROW_CHUNK
    rows = []
    for spec in ["default", *filter(None, specs.split(";"))]:
        try:
            if spec != "default":
                key, value = spec.split("=")
                if key == "row_chunk":
                    fused_plan.LEAN_ROW_CHUNK = int(value)
                else:
                    ft.BACKWARD_CONFIG = replace(default_cfg, **{key: int(value)})
            r = measure.fwd_bwd_time_and_memory(registry.get(LEAN), b, 1.0, 2, 5, gemm)
            lean = measure._grads(registry.get(LEAN), b.hidden, b.weight, b.targets, 1.0, g)
            same = bool(torch.equal(lean[0], fast[0]) and torch.equal(lean[1], fast[1]))
            del lean
            rows.append(
                {"variant": spec, "T": tokens, **r, "fwd_bwd_x_gemm": r["fwd_bwd_ms_median"] / r["fwd_bwd_gemm_ms_median"], "bits_equal_fast": same}
            )
        except Exception as exc:  # a variant that fails must not lose the others
            rows.append({"variant": spec, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            ft.BACKWARD_CONFIG, fused_plan.LEAN_ROW_CHUNK = default_cfg, default_chunk
        print("lean variant:", json.dumps(rows[-1]), flush=True)
    return rows


def profile_plans(tokens: int = 8192, calls: int = 3) -> dict:
    """GPU time per kernel (ms per fwd+bwd call, torch.profiler) of the fast and the lean plan at ``tokens``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    b = synthetic_bundle(BundleShape(tokens, H, V, seed=0)).to("cuda")
    g = measure._grad_out(tokens, b.hidden.device)
    out = {}
    for name in (FAST, LEAN):
        h = b.hidden.detach().clone().requires_grad_()
        w = b.weight.detach().clone().requires_grad_()

        def step():
            h.grad = w.grad = None
            with torch.enable_grad():
                registry.get(name).selected_logprobs(h, w, b.targets).backward(g)

        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                step()
            torch.cuda.synchronize()
        per = {}
        for evt in prof.key_averages():
            ms = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
            if ms:
                per[evt.key[:80]] = {"ms_per_call": ms / 1000 / calls, "launches_per_call": evt.count / calls}
        out[name] = {
            "kernels": dict(sorted(per.items(), key=lambda kv: -kv[1]["ms_per_call"])),
            "total_ms_per_call": sum(v["ms_per_call"] for v in per.values()),
        }
        h.grad = w.grad = None
        print(
            f"profile {name}: total {out[name]['total_ms_per_call']:.2f} ms;",
            {k[:40]: round(v["ms_per_call"], 2) for k, v in list(out[name]["kernels"].items())[:6]},
            flush=True,
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", default="256,1024,2048,4096,8192")
    p.add_argument("--names", default=f"{FAST},{LEAN},{PEERS}")
    p.add_argument("--repeat-tokens", default="1024,4096")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--reps", type=int, help="calls of each side per timing (fwd+bwd: half; default: bench.DEFAULT_REPS)")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--forward-only", action="store_true", help="only the forward repeats (idle-start and queued)")
    p.add_argument("--skip-profile", action="store_true")
    p.add_argument(
        "--lean-variants",
        default="lean_bytes=65011712;lean_bytes=50331648;lean_bytes=41943040",
        help="';'-separated, each key=value (row_chunk or a BackwardConfig field)",
    )
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench
    from harness.operators.bundles import BundleShape, synthetic_bundle

    if not torch.cuda.is_available():
        print("bench_issue16: needs a CUDA device", file=sys.stderr)
        return 2
    out = Path(args.out)
    args.reps = args.reps or bench.default_reps("cuda")
    if args.forward_only:
        tokens = [int(x) for x in args.repeat_tokens.split(",")]
        rec = {"gpu_state_start": gpu_state(), **bench.environment(torch.device("cuda"))}
        rec["forward_repeats"] = forward_repeats(tokens, args.repeats, 3, args.reps)
        _print_repeats(rec["forward_repeats"])
        bench.write_record(rec, out)
        rec["gpu_state_end"] = gpu_state()
        bench.write_record(rec, out)
        return 0
    state = {"gpu_state_start": gpu_state()}
    state["lean_equals_fast"] = {str(t): lean_equals_fast(t) for t in (8192, 5000)}
    print("lean vs fast bits:", json.dumps(state["lean_equals_fast"]), flush=True)
    if not all(v for per_t in state["lean_equals_fast"].values() for tp in per_t.values() for v in tp.values()):
        out.write_text(json.dumps(state, indent=1) + "\n")
        print("bench_issue16: the lean plan's gradients differ from the fast plan's; no sweep", file=sys.stderr)
        return 3
    tokens = [int(x) for x in args.tokens.split(",")]
    record = {}
    if not args.skip_sweep:
        bundles = [synthetic_bundle(BundleShape(n, H, V, seed=0)) for n in tokens]

        def progress(row):
            keys = (
                "x_gemm",
                "x_gemm_queued",
                "fwd_bwd_x_gemm",
                "fwd_bwd_x_gemm_queued",
                "fwd_bwd_peak_extra_bytes",
                "grad_batch_invariant",
                "grad_tp_invariant",
                "error",
            )
            print(f"T={row['shape']['T']} {row['name']}: " + ", ".join(f"{k}={row.get(k)}" for k in keys), flush=True)

        record = bench.run_token_sweep(bundles, "cuda", args.names.split(","), reps=args.reps, out_path=out, on_row=progress)
    record |= state
    record["gpu_state_after_sweep"] = gpu_state()
    bench.write_record(record, out)
    record["forward_repeats"] = forward_repeats([int(x) for x in args.repeat_tokens.split(",")], args.repeats, 3, args.reps)
    _print_repeats(record["forward_repeats"])
    bench.write_record(record, out)
    record["fwd_bwd_repeats"] = {"8192": fwd_bwd_repeats(8192, 3, max(3, args.reps // 2))}
    bench.write_record(record, out)
    if not args.skip_profile:
        try:
            record["profile_8192"] = profile_plans()
        except Exception as exc:  # the profiler is a lead, not the record
            record["profile_8192"] = {"error": f"{type(exc).__name__}: {exc}"}
        bench.write_record(record, out)
    if args.lean_variants:
        record["lean_variants"] = lean_variants(args.lean_variants)
    record["gpu_state_end"] = gpu_state()
    bench.write_record(record, out)
    if record.get("results"):
        from harness.operators import render

        render.print_table(record)
    print(
        "fwd+bwd repeats T=8192 (idle-start, queued):",
        json.dumps(
            {
                n: [(round(x["fwd_bwd_x_gemm"], 3), round(x["fwd_bwd_x_gemm_queued"], 3)) for x in r["repeats"]]
                for n, r in record["fwd_bwd_repeats"]["8192"].items()
            }
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
