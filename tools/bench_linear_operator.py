"""The linear boundary's operators on a run's captured tensors (harness.attribution.linear_bench).

    .venv/bin/python tools/bench_linear_operator.py RUN_DIR_OR_CAPTURE [--candidate fp8-block-linear] [--out bench.json]

Takes a capture bundle (dumps/capture_N.pt, the first one of a run directory), rebuilds the FP8
linears' inputs from the rollout side's hidden states and the synced weights, and prints one row
per operator and linear: error against the fp64 reference (bf16 ulps), batch invariance, median
time; then the boundary's train-rollout gap natively and with the candidate on both sides. CPU,
this machine: the record names it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.attribution.linear_bench import bench_capture  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a run directory or a capture bundle")
    parser.add_argument("--candidate", default="fp8-block-linear")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    path = args.source
    if path.is_dir():
        found = sorted((path / "dumps").glob("capture_*.pt"), key=lambda p: int(p.stem.split("_")[1]) if p.stem.split("_")[1].isdigit() else 1 << 30)
        if not found:
            print(f"error: {path}: no dumps/capture_N.pt", file=sys.stderr)
            return 2
        path = found[0]
    bench = bench_capture(path, args.candidate)
    if bench.problems:
        print("error: " + bench.problems[0], file=sys.stderr)
        return 2
    print(f"{bench.source} (FP8 rollout: {bench.quantized}; {bench.machine})")
    for row in bench.rows:
        print(
            f"{row.operator:24} {row.linear:16} {row.rows:5} rows  max error {row.max_abs_error:.3g} ({row.max_ulps:.3g} ulp, "
            f"{row.max_bound_ratio:.3g}x the candidate's bound)  "
            f"batch-variant {row.invariance_differing}/{row.invariance_rows}  {row.median_seconds * 1e3:.2f} ms"
        )
    for name, gap in bench.native_gap.items():
        print(f"gap {name:16} native max {gap['max']:.3g} mean {gap['mean']:.3g}  candidate max {bench.candidate_gap[name]['max']:.3g}")
    if args.out:
        args.out.write_text(json.dumps(bench.as_dict(), indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
