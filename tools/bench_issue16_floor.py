"""Issue 16, round 8: what cuBLAS itself takes for the products an exact fwd+bwd needs, and what the clock does.

    python tools/bench_issue16_floor.py --out /tmp/floor.json [--tokens 1024,8192] [--clock-tokens 1024,2048,4096]
    python tools/bench_issue16_floor.py --out /tmp/hot.json --tokens '' --skip-clock --reps 100 --hot-tokens 8192,1024

Three questions the targets of issue 16 (fwd+bwd <= 4.3x the GEMM at T=8192; forward <= 1.15x at T=1024) rest on:

1. The floor. An exact fwd+bwd of the selected log-probs pays four GEMM-sized products: the forward's logits
   (h W^T), the logits again for grad_logits (nothing of T x V is kept), grad_hidden = G W ([T, V] x [V, H]) and
   grad_weight = G^T h ([V, T] x [T, H]). Each is timed here as cuBLAS runs it (torch.matmul, bf16, G the real
   softmax gradient), queued and alternating with the reference GEMM as the bench times operators; then the four
   back to back as one call; then the unfused library path a trainer would write (logits materialised, fp32
   log_softmax, autograd), with its extra memory. The sum of cuBLAS's four products is the least any operator of
   this algorithm could take with library-grade GEMMs and no epilogue at all.
2. The clock. At T=1024 the fused forward measured 1.14-1.22x the GEMM in round 7, the first repeat always the
   lowest, and the card was at its power limit by the end. Here the forward is timed (queued, alternating with the
   GEMM) --clock-repeats times on the card as it comes, then after --heat-seconds of sustained GEMMs, each repeat
   with the SM clock, power and the clock-event reasons (NVML) sampled every 20 ms while it ran.
3. The sustained-load clock (--hot-tokens). A training step runs the LM head amid the layers' GEMMs, with the card
   at its power cap: each timed call, the operator's and the GEMM's alternately, is queued behind --hot-burst GEMMs
   at T=8192 instead of a sleep, so both run at that clock.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H, V = 2048, 151936
FAST = "fused-linear-logprob"


class ClockSampler:
    """SM clock (MHz), power (W) and clock-event reasons (NVML bitmask) every ``period`` seconds in a thread."""

    def __init__(self, period: float = 0.02):
        self.samples: list[tuple[int, float, int]] = []
        self._stop = threading.Event()
        self.period, self.why_none = period, None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # no NVML: the timings stand, the clock is "not sampled"
            self.nvml, self.why_none = None, f"{type(exc).__name__}: {exc}"

    def _reasons(self) -> int:
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self.nvml, name):
                return int(getattr(self.nvml, name)(self.handle))
        return -1

    def _run(self):
        while self.nvml is not None and not self._stop.is_set():
            clock = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
            power = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
            self.samples.append((clock, power, self._reasons()))
            time.sleep(self.period)

    def __enter__(self):
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {"samples": 0, "not_sampled": self.why_none or "no sample in the window"}
        clocks, powers, reasons = zip(*self.samples)
        # NVML clock-event reason bits: 0x4 software power cap, 0x20 software thermal, 0x40 hardware thermal,
        # 0x80 hardware power brake (nvml.h, nvmlClocksEventReason*).
        return {
            "samples": len(clocks),
            "sm_mhz_median": statistics.median(clocks),
            "sm_mhz_min": min(clocks),
            "sm_mhz_max": max(clocks),
            "power_w_median": statistics.median(powers),
            "power_cap_fraction": sum(1 for r in reasons if r >= 0 and r & 0x4) / len(reasons),
            "thermal_fraction": sum(1 for r in reasons if r >= 0 and r & 0x60) / len(reasons),
        }


def softmax_grad(hidden, weight, targets, grad_out):
    """G = (onehot - softmax(h W^T)) * grad_out, in bf16: the gradient of sum(grad_out * logp) w.r.t. the logits."""
    import torch

    logits = (hidden @ weight.T).float()
    g = -torch.softmax(logits, dim=-1)
    g[torch.arange(len(targets), device=g.device), targets] += 1
    return (g * grad_out[:, None]).to(hidden.dtype)


class UnfusedLibraryPath:
    """The path a trainer writes without a fused operator: the logits materialised (bf16 GEMM), fp32 log_softmax,
    the target's column gathered, autograd for the backward. Duck-typed for measure.fwd_bwd_time_and_memory."""

    class contract:  # noqa: N801 (read as op.contract.has_backward, as on an Operator)
        has_backward = True

    def selected_logprobs(self, hidden, weight, targets, temperature: float = 1.0, tp_size: int = 1):
        import torch

        logits = (hidden @ weight.T).float() / temperature
        return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]


def floor_at(tokens: int, reps: int) -> dict:
    """cuBLAS's time for each product of an exact fwd+bwd, for the four back to back, and for the unfused library
    path, each in multiples of the reference GEMM timed alternately with it (queued, and from idle)."""
    import torch

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    b = synthetic_bundle(BundleShape(tokens, H, V, seed=0)).to("cuda")
    h, w, t = b.hidden, b.weight, b.targets
    grad_out = measure._grad_out(tokens, h.device)
    G = softmax_grad(h, w, t, grad_out)
    gemm = lambda: h @ w.T  # noqa: E731
    products = {
        "logits h W^T (the reference GEMM itself)": gemm,
        "grad_hidden G W": lambda: G @ w,
        "grad_weight G^T h": lambda: G.T @ h,
    }

    def four():
        h @ w.T
        h @ w.T
        G @ w
        G.T @ h

    out = {"T": tokens, "products": {}}
    with torch.no_grad():
        for name, fn in products.items():
            out["products"][name] = measure.paired_fields(fn, gemm, h.device, 3, reps)
            print(f"T={tokens} {name}: {out['products'][name]['x_gemm_queued']:.3f}x queued", flush=True)
        out["four_products"] = measure.paired_fields(four, gemm, h.device, 3, reps)
        print(f"T={tokens} four products: {out['four_products']['x_gemm_queued']:.3f}x queued", flush=True)
    G = None  # free the [T, V] gradient before the fwd+bwd paths allocate their own
    torch.cuda.empty_cache()

    # The unfused library path and the fused fast plan, timed and measured as the bench measures fwd+bwd.
    for key, op in (("unfused_library_fwd_bwd", UnfusedLibraryPath()), ("fused_fast_fwd_bwd", registry.get(FAST))):
        fb = measure.fwd_bwd_time_and_memory(op, b, 1.0, 2, max(3, reps // 2), gemm)
        out[key] = fb | {"fwd_bwd_x_gemm": fb["fwd_bwd_ms_median"] / fb["fwd_bwd_gemm_ms_median"]}
        print(f"T={tokens} {key}: {fb['fwd_bwd_x_gemm_queued']:.3f}x queued", flush=True)
        torch.cuda.empty_cache()
    return out


def clock_repeats(tokens: list[int], repeats: int, reps: int, heat_seconds: float) -> dict:
    """The fused forward against the GEMM at each of ``tokens``, queued and alternating call by call, ``reps`` calls
    of each side per repeat, T interleaved within each repeat (as round 7's repeats were): ``repeats`` times on the
    card as it comes, then ``heat_seconds`` of back-to-back GEMMs at T=8192 (the sustained load of a sweep), then
    ``repeats`` times again; each repeat and the heat with the clock sampled while it ran."""
    import torch

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    op = registry.get(FAST)
    bundles = {t: synthetic_bundle(BundleShape(t, H, V, seed=0)).to("cuda") for t in tokens}
    sampler = ClockSampler()
    out = {"T": tokens, "reps_per_repeat": reps, "before_heat": {str(t): [] for t in tokens}, "heat": None}
    out["after_heat"] = {str(t): [] for t in tokens}

    def repeat(phase: str):
        for t, b in bundles.items():
            call, gemm = (lambda b=b: op.selected_logprobs(b.hidden, b.weight, b.targets)), (lambda b=b: b.hidden @ b.weight.T)
            with sampler:
                q = measure.time_ms_paired_queued(call, gemm, b.hidden.device, 3, reps)
            rows = out[phase][str(t)]
            rows.append({**measure.queued_fields(q), "clock": sampler.summary()})
            c = rows[-1]["clock"]
            print(
                f"T={t} {phase} {len(rows) - 1}: {rows[-1]['x_gemm_queued']:.3f}x queued (held {rows[-1]['queued_held']}), "
                f"SM {c.get('sm_mhz_median')} MHz, {c.get('power_w_median')} W, power cap {c.get('power_cap_fraction')}",
                flush=True,
            )

    with torch.no_grad():
        for _ in range(repeats):
            repeat("before_heat")
        big = synthetic_bundle(BundleShape(8192, H, V, seed=1)).to("cuda")
        with sampler:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < heat_seconds:
                for _ in range(20):
                    big.hidden @ big.weight.T
                torch.cuda.synchronize()
        out["heat"] = {"seconds": heat_seconds, "gemm_T": 8192, "clock": sampler.summary()}
        print(f"heat: {out['heat']['clock']}", flush=True)
        del big
        for _ in range(repeats):
            repeat("after_heat")
    return out


def hot_timing(tokens: list[int], reps: int, burst: int) -> dict:
    """The fused forward (and at T=8192 fwd+bwd) against the GEMM with each timed call queued behind ``burst``
    GEMMs at T=8192 instead of a sleep: the card is kept at its sustained-load clock (power cap) while both sides
    are timed, call by call alternately, the clock sampled throughout."""
    import torch

    from harness.operators import measure, registry
    from harness.operators.bundles import BundleShape, synthetic_bundle

    op = registry.get(FAST)
    big = synthetic_bundle(BundleShape(8192, H, V, seed=1)).to("cuda")

    def hot_call(fn) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(burst):
            big.hidden @ big.weight.T
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def paired(call, gemm, n) -> dict:
        for _ in range(3):
            call(), gemm()
        a, b = [], []
        with ClockSampler() as sampler:
            for _ in range(n):
                a.append(hot_call(call))
                b.append(hot_call(gemm))
        ms, ref = statistics.median(a), statistics.median(b)
        return {"ms_median_hot": ms, "gemm_ms_hot": ref, "x_gemm_hot": ms / ref, "calls": n, "clock": sampler.summary()}

    out = {"burst_gemms_T8192": burst, "forward": [], "fwd_bwd": []}  # in the order timed (a T may come twice)
    for t in tokens:
        b = synthetic_bundle(BundleShape(t, H, V, seed=0)).to("cuda")
        gemm = lambda b=b: b.hidden @ b.weight.T  # noqa: E731
        with torch.no_grad():
            r = {"T": t} | paired(lambda b=b: op.selected_logprobs(b.hidden, b.weight, b.targets), gemm, reps)
            out["forward"].append(r)
        print(
            f"hot T={t} forward: {r['x_gemm_hot']:.3f}x, SM {r['clock'].get('sm_mhz_median')} MHz, cap {r['clock'].get('power_cap_fraction')}",
            flush=True,
        )
        if t == 8192:
            h, w, tg = b.hidden.detach().clone().requires_grad_(), b.weight.detach().clone().requires_grad_(), b.targets
            g = measure._grad_out(t, h.device)

            def step():
                h.grad = w.grad = None
                with torch.enable_grad():
                    op.selected_logprobs(h, w, tg).backward(g)

            r = {"T": t} | paired(step, gemm, max(3, reps // 2))
            out["fwd_bwd"].append(r)
            print(f"hot T={t} fwd+bwd: {r['x_gemm_hot']:.3f}x, SM {r['clock'].get('sm_mhz_median')} MHz", flush=True)
        b = None
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", default="1024,8192", help="T of the floor ('' for none)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--clock-tokens", default="1024")
    p.add_argument("--clock-repeats", type=int, default=5, help="repeats before and again after the heat")
    p.add_argument("--clock-reps", type=int, default=100, help="calls of each side per clock repeat")
    p.add_argument("--heat-seconds", type=float, default=20.0)
    p.add_argument("--hot-tokens", default="", help="also time forward (and fwd+bwd at 8192) behind GEMM bursts at these T")
    p.add_argument("--hot-burst", type=int, default=3, help="GEMMs at T=8192 queued before each hot call")
    p.add_argument("--skip-clock", action="store_true")
    args = p.parse_args(argv)

    import torch

    from harness.operators import bench

    if not torch.cuda.is_available():
        print("bench_issue16_floor: needs a CUDA device", file=sys.stderr)
        return 2
    out = Path(args.out)
    record = {**bench.environment(torch.device("cuda")), "floor": [], "clock_repeats": None}
    # The clock first, on the card as it comes (then warmed by its own repeats), then the floor.
    if args.hot_tokens:
        record["hot"] = hot_timing([int(x) for x in args.hot_tokens.split(",")], args.reps, args.hot_burst)
        bench.write_record(record, out)
    if not args.skip_clock:
        record["clock_repeats"] = clock_repeats(
            [int(x) for x in args.clock_tokens.split(",")], args.clock_repeats, args.clock_reps, args.heat_seconds
        )
    bench.write_record(record, out)
    for tokens in (int(x) for x in args.tokens.split(",") if x):
        record["floor"].append(floor_at(tokens, args.reps))
        bench.write_record(record, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
