"""Issue 16 round 5: the fused forward's launch path and merge on one GPU, in one process (development record).

    python tools/fused_launch_check.py --out /tmp/launch.json

1. Bits: the partials through the C launcher (``fused_triton.DIRECT_LAUNCH``) against Triton's launch path,
   the merge at several ``MERGE_GROUP`` values (``N_CHUNKS`` = round 4's fully unrolled form) with and without
   the range check, the operator's call; aligned and unaligned targets, several T. Exits 1 on any difference.
2. Merge GPU time per group size and form (behind a busy GPU, so no host time), registers and spills.
3. Host microseconds to issue each piece while the GPU is busy, direct launch on and off.
4. The operator's forward against the bf16 GEMM, timed alternately call by call, direct launch on and off
   in alternating rounds (the card's clock drifts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def host_us(fn, calls: int = 30) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # keeps the GPU busy: only the host's time to issue a call is counted
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    out = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return round(out, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", default="256,1024,2048,4096,8192")
    p.add_argument("--groups", default="8,16,120")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--merge-only", action="store_true", help="bits and the merge's time and registers only")
    p.add_argument("--odd", type=int, default=2, help="how many of the unaligned cases (T=1027 at row 1, T=256 at row 3) to check")
    args = p.parse_args()
    import torch

    from harness.operators import fused_triton as ft
    from harness.operators import measure, registry
    from harness.operators.bench import environment
    from harness.operators.bundles import BundleShape, synthetic_bundle
    from harness.operators.fused_plan import N_CHUNKS, chunk_bounds
    from harness.operators.impl_fused import fused_forward

    tokens = [int(x) for x in args.tokens.split(",")]
    groups = [int(x) for x in args.groups.split(",")]
    dev = torch.device("cuda")
    merge_groups = (ft.MERGE_GROUP, ft.MERGE_GROUP_UNCHECKED)  # the module's defaults, restored after each experiment
    rec: dict = {"env": environment(dev), "bits": [], "merge": [], "host_us": {}, "forward": []}

    def save():
        Path(args.out).write_text(json.dumps(rec, indent=1))

    big = synthetic_bundle(BundleShape(max(tokens), 2048, 151936)).to(dev)
    w = big.weight
    vocab = w.shape[0]
    bounds = tuple(chunk_bounds(vocab))
    op = registry.get("fused-linear-logprob")
    flag = torch.zeros(2, dtype=torch.int32, device=dev)
    ok = True
    # 1. bits
    for T, off in [(T, 0) for T in tokens] + [(1027, 1), (256, 3)][: args.odd]:
        h, t = big.hidden[off : off + T], big.targets[off : off + T]
        row: dict = {"T": T, "offset": off}
        ft.DIRECT_LAUNCH = False
        ft.MERGE_GROUP = ft.MERGE_GROUP_UNCHECKED = N_CHUNKS
        ref = [ft.triton_partials(h, w, t, bounds, 1.0) for _ in range(2)][1]  # second call: the compiled launch
        ref_merge = {c: ft.triton_merge(*ref, *((t, vocab, flag) if c else ())) for c in (False, True)}
        ref_op = op.selected_logprobs(h, w, t)
        ft.DIRECT_LAUNCH = True
        for _ in range(2):  # the first call of a key compiles, the second goes through the C launcher
            got = ft.triton_partials(h, w, t, bounds, 1.0)
        row["partials_direct_equal"] = all(torch.equal(a, b) for a, b in zip(ref, got))
        row["direct_taken"] = any(v is not None for v in ft._launch_partials_dtma._direct.values())
        for g in groups:
            ft.MERGE_GROUP = ft.MERGE_GROUP_UNCHECKED = g
            for c in (False, True):
                for direct in (False, True):
                    ft.DIRECT_LAUNCH = direct
                    outs = [ft.triton_merge(*ref, *((t, vocab, flag) if c else ())) for _ in range(2)]
                    row[f"merge_g{g}_check{int(c)}_direct{int(direct)}_equal"] = all(torch.equal(a, b) for a, b in zip(ref_merge[c], outs[1]))
        ft.MERGE_GROUP, ft.MERGE_GROUP_UNCHECKED, ft.DIRECT_LAUNCH = merge_groups[0], merge_groups[1], True
        got_op = [op.selected_logprobs(h, w, t) for _ in range(2)][1]
        row["operator_equal"] = bool(torch.equal(ref_op, got_op))
        row["flag_clean"] = int(flag[0]) == 0
        ok &= all(v for k, v in row.items() if k.endswith("equal") or k == "flag_clean")
        rec["bits"].append(row)
        print("bits", row, flush=True)
    save()
    # 2. merge time and registers
    ft.DIRECT_LAUNCH = True
    for T in (1024, 8192):
        h, t = big.hidden[:T], big.targets[:T]
        parts = ft.triton_partials(h, w, t, bounds, 1.0)
        for g in groups:
            ft.MERGE_GROUP = ft.MERGE_GROUP_UNCHECKED = g
            for c in (False, True):
                call = lambda: ft.triton_merge(*parts, *((t, vocab, flag) if c else ()))  # noqa: E731
                call()
                ts = []
                for _ in range(30):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(2_000_000)
                    e0.record()
                    call()
                    e1.record()
                    torch.cuda.synchronize()
                    ts.append(e0.elapsed_time(e1) * 1e3)
                r = {"T": T, "group": g, "check": c, "gpu_us": round(statistics.median(ts), 1)}
                rec["merge"].append(r)
                print("merge", r, flush=True)
    rec["merge_kernels"] = [
        {"group": k[-1][-1], "check": k[-1][-2], "regs": v.n_regs, "spills": v.n_spills} for k, v in ft._launch_merge.compiled.items()
    ]
    print("merge kernels", rec["merge_kernels"], flush=True)
    ft.MERGE_GROUP, ft.MERGE_GROUP_UNCHECKED = merge_groups
    save()
    if args.merge_only:
        print("BITS", "OK" if ok else "DIFFER")
        return 0 if ok else 1
    # 3. host time, GPU busy
    T = 1024
    h, t = big.hidden[:T], big.targets[:T]
    parts = ft.triton_partials(h, w, t, bounds, 1.0)
    pflag = torch.zeros(2, dtype=torch.int32, pin_memory=True)
    for direct in (False, True, False, True):
        ft.DIRECT_LAUNCH = direct
        pieces = {
            "operator call (selected_logprobs)": lambda: op.selected_logprobs(h, w, t),
            "fused_forward": lambda: fused_forward(h, w, t, 1.0, 1),
            "triton_partials": lambda: ft.triton_partials(h, w, t, bounds, 1.0),
            "triton_merge": lambda: ft.triton_merge(*parts),
            "triton_merge with the range check": lambda: ft.triton_merge(*parts, t, vocab, pflag),
            "torch bf16 GEMM": lambda: h @ w.T,
        }
        name = f"direct{int(direct)}"
        rec["host_us"].setdefault(name, []).append({k: host_us(fn) for k, fn in pieces.items()})
        print("host", name, rec["host_us"][name][-1], flush=True)
    save()
    # 4. forward vs GEMM, direct launch on / off in alternating rounds
    for r in range(args.rounds):
        for T in tokens:
            h, t = big.hidden[:T], big.targets[:T]
            for direct in (False, True):
                ft.DIRECT_LAUNCH = direct
                call = lambda: op.selected_logprobs(h, w, t)  # noqa: E731
                ms, gemm = measure.time_ms_paired(call, lambda: h @ w.T, dev, 3, 10)
                row = {"round": r, "T": T, "direct": direct, "ms": round(ms, 4), "gemm_ms": round(gemm, 4), "x_gemm": round(ms / gemm, 4)}
                rec["forward"].append(row)
                print("fwd", row, flush=True)
        save()
    ft.DIRECT_LAUNCH = True
    print("summary x_gemm (direct0 / direct1):")
    for T in tokens:
        xs = {d: [x["x_gemm"] for x in rec["forward"] if x["T"] == T and x["direct"] == d] for d in (False, True)}
        print(T, xs[False], xs[True])
    rec["bits_ok"] = bool(ok)
    save()
    print("BITS", "OK" if ok else "DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
