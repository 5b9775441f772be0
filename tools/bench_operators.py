"""Operator bench CLI: measure every available selected-logprob operator, write JSON, print a table.

    python tools/bench_operators.py --device cuda --shape production --out reports/bench/h200.json
    python tools/bench_operators.py --device cpu --shape 256,256,4096 --out /tmp/cpu.json
    python tools/bench_operators.py --device cuda --bundle probe.safetensors --out reports/bench/probe.json

--shape is ``production`` (T=8192, H=2048, V=151936), ``small`` (T=256, H=256, V=4096) or T,H,V.
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
    p.add_argument("--out", required=True, help="JSON record path, e.g. reports/bench/h200-production.json")
    p.add_argument("--markdown", help="also write the table as markdown to this path")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, help="calls of each side per timing (default: bench.DEFAULT_REPS, 100 on cuda, 10 on cpu)")
    p.add_argument("--sweep", action="store_true", help="also time the fused kernel's candidate configs (cuda)")
    p.add_argument("--tokens", help="comma-separated T values: one bench per T (same H, V, seed), rows of all in one record")
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench, registry, render
    from harness.operators.bundles import BundleError, BundleShape, load_bundle, synthetic_bundle

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_operators: --device cuda, but torch sees no CUDA device here", file=sys.stderr)
        return 2
    try:
        bundle = load_bundle(args.bundle) if args.bundle else synthetic_bundle(BundleShape(*args.shape, seed=args.seed))
    except BundleError as exc:
        print(f"bench_operators: {exc}", file=sys.stderr)
        return 2
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
        bundles = [synthetic_bundle(BundleShape(n, h, v, seed=args.seed)) for n in tokens]
        record = bench.run_token_sweep(bundles, args.device, names, args.temperature, args.warmup, args.reps, out_path=args.out, on_row=progress)
    else:
        record = bench.run_bench(bundle, args.device, names, args.temperature, args.warmup, args.reps, out_path=args.out, on_row=progress)
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


if __name__ == "__main__":
    sys.exit(main())
