"""The keep plan's fwd+bwd on a GPU, kernel by kernel, in each variant of the kernels that touch the whole [T, V]
buffer (fused_keep's FORWARD_FLATTEN, CONVERT_BLOCK_T, CONVERT_WARPS, CONVERT_CHUNK_FIRST, FORWARD_GROUP_T: no bit
depends on any of them).

    python tools/probe_keep_breakdown.py    # prints; the H100 outputs are kept in reports/bench/h100-keep-breakdown*.json

At T=8192, H=2048, V=151936 (regime matched): for each variant, the keep plan's fwd+bwd (fp32 gradients) against
the bf16 GEMM timed alternately (5 calls), each kernel's GPU time in one call (torch.profiler, via
probe_fused_parts.kernel_times) and whether its gradients are the first variant's bits; the fast plan beside them.
"""

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.operators import fused_keep, measure  # noqa: E402
from harness.operators.bundles import BundleShape  # noqa: E402
from harness.operators.impl_fused import fused_forward, fused_forward_backward, keep_fused_backward  # noqa: E402
from harness.operators.regimes import regime_bundle  # noqa: E402

spec = importlib.util.spec_from_file_location("probe_fused_parts", ROOT / "tools" / "probe_fused_parts.py")
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)
b = regime_bundle("matched", BundleShape(8192, 2048, 151936)).to("cuda")
h, w, t = b.hidden, b.weight, b.targets
g = torch.randn(8192, generator=torch.Generator().manual_seed(1)).cuda()
gemm = lambda: h @ w.T  # noqa: E731
dev = torch.device("cuda")
KNOBS = (
    "FORWARD_FLATTEN",
    "CONVERT_BLOCK_T",
    "CONVERT_WARPS",
    "CONVERT_CHUNK_FIRST",
    "FORWARD_GROUP_T",
    "CONVERT_ALIGNED",
    "GROUP_SUM_IN_KERNEL",
    "WEIGHT_COPY_TRITON",
)
DEFAULT = tuple(getattr(fused_keep, k) for k in KNOBS)
# The defaults, then the step before (h100-keep-variants.json's best), then each new path alone, then wider conversions.
VARIANTS = [
    DEFAULT,
    (True, 16, 4, True, 0, False, False, False),
    (True, 16, 4, True, 0, True, False, False),
    (True, 16, 4, True, 0, False, True, True),
    (True, 32, 8, True, 0, True, True, True),
    (True, 64, 8, True, 0, True, True, True),
    (True, 8, 4, True, 0, True, True, True),
]


def keep():
    k = []
    lp, lse = fused_forward(h, w, t, 1.0, 1, kept=k)
    return keep_fused_backward(h, w, t, lp, lse, k, 1.0, g, 1, torch.float32)


fast = lambda: fused_forward_backward(h, w, t, 1.0, g, 1, torch.float32, "fast")  # noqa: E731
ref = None
summary = []
for variant in VARIANTS:
    for name, value in zip(KNOBS, variant):
        setattr(fused_keep, name, value)
    label = ", ".join(f"{k}={v}" for k, v in zip(KNOBS, variant))
    try:
        out = keep()
    except Exception as exc:  # a variant that cannot compile or run leaves the others measured
        print(f"keep {label}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
        continue
    ref = out if ref is None else ref
    same = torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    ms, gm = measure.time_ms_paired(keep, gemm, dev, 1, 5)
    print(f"keep {label}: {ms:.2f} ms = {ms / gm:.3f}x GEMM ({gm:.2f}); bits of the first variant: {same}", flush=True)
    times = P.kernel_times(keep)
    for k, v in list(times.items())[:7]:
        print(f"   {v['ms']:7.2f} ms x{v['calls']} {k[:70]}", flush=True)
    part = {k: v["ms"] for k, v in times.items() if "keep" in k}
    summary.append((variant, ms / gm, part, same))
for name, value in zip(KNOBS, DEFAULT):
    setattr(fused_keep, name, value)
ms, gm = measure.time_ms_paired(fast, gemm, dev, 1, 5)
print(f"fast: {ms:.2f} ms = {ms / gm:.3f}x GEMM", flush=True)
print(f"variant {KNOBS} | x GEMM | partials_keep ms | keep_convert ms | same bits", flush=True)
for variant, x, part, same in summary:
    pk = next((v for k, v in part.items() if "partials_keep" in k), float("nan"))
    kc = next((v for k, v in part.items() if "keep_convert" in k), float("nan"))
    print(f"{variant} | {x:.3f} | {pk:.2f} | {kc:.2f} | {same}")
