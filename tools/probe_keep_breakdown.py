"""The keep plan's fwd+bwd on a GPU, kernel by kernel, with its products launched H-tiles-first and not.

    python tools/probe_keep_breakdown.py    # prints; the H100 output of 2026-12-06 is reports/bench/h100-keep-breakdown.json

At T=8192, H=2048, V=151936 (regime matched): the keep plan's fwd+bwd (fp32 gradients) against the bf16 GEMM
timed alternately (5 calls), each kernel's GPU time in one call (torch.profiler, via probe_fused_parts.kernel_times),
whether fused_keep.H_FIRST changes a bit, and the fast plan beside it.
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


def keep():
    k = []
    lp, lse = fused_forward(h, w, t, 1.0, 1, kept=k)
    return keep_fused_backward(h, w, t, lp, lse, k, 1.0, g, 1, torch.float32)


fast = lambda: fused_forward_backward(h, w, t, 1.0, g, 1, torch.float32, "fast")  # noqa: E731
ref = None
for hf in (True, False):
    fused_keep.H_FIRST = hf
    out = keep()
    ref = out if ref is None else ref
    if hf is False:
        print("H_FIRST changes no bit:", torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1]))
    ms, gm = measure.time_ms_paired(keep, gemm, dev, 1, 5)
    print(f"keep H_FIRST={hf}: {ms:.2f} ms = {ms / gm:.3f}x GEMM ({gm:.2f})", flush=True)
    for k, v in list(P.kernel_times(keep).items())[:7]:
        print(f"   {v['ms']:7.2f} ms x{v['calls']} {k[:70]}", flush=True)
ms, gm = measure.time_ms_paired(fast, gemm, dev, 1, 5)
print(f"fast: {ms:.2f} ms = {ms / gm:.3f}x GEMM", flush=True)
