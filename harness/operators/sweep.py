"""Time the fused kernel's candidate configurations on one bundle (GPU only).

Each configuration is invariant by construction; the sweep checks that (one batch slice, TP=8) and
times it against the GEMM, so the configuration fixed in fused_triton.HOPPER_CONFIG is a measured
choice. The kernel's bits depend on the configuration, so it is fixed once chosen.
"""

from __future__ import annotations

import torch

from harness.operators import measure
from harness.operators.fused_plan import merge_partials, shard_chunk_bounds
from harness.operators.fused_triton import KernelConfig, triton_partials

CANDIDATES = [
    KernelConfig(128, 256, 64, 8, 3, "tma_flatten"),
    KernelConfig(128, 256, 64, 8, 4, "tma_flatten"),
    KernelConfig(128, 256, 64, 8, 2, "tma_flatten"),
    KernelConfig(256, 128, 64, 8, 3, "tma_flatten"),
    KernelConfig(128, 128, 64, 8, 4, "tma_flatten"),
    KernelConfig(128, 256, 64, 8, 3, "tma"),
    KernelConfig(128, 256, 64, 8, 3, "nested"),
    KernelConfig(128, 256, 64, 8, 3, "tma_flatten"),  # the first again: run-to-run spread
]


def _fused(h, w, t, cfg, temperature=1.0, tp=1):
    vocab = w.shape[0]
    parts = []
    for r in range(tp):
        start, local = shard_chunk_bounds(vocab, tp, r)
        parts.append(triton_partials(h, w[start : start + vocab // tp], t - start, local, temperature, cfg))
    m, s, z = (torch.cat([p[i] for p in parts]) for i in range(3))
    return merge_partials(m, s, z)[0]


def sweep(bundle, ref64, gemm_ms: float, warmup=2, reps=5, candidates=CANDIDATES, on_row=None) -> list[dict]:
    out = []
    h, w, t = bundle.hidden, bundle.weight, bundle.targets
    for cfg in candidates:
        row = {"config": cfg.as_dict()}
        try:
            full = _fused(h, w, t, cfg)
            n = min(517, h.shape[0] - 1)
            alone = _fused(h[1 : 1 + n], w, t[1 : 1 + n], cfg)
            row["batch_invariant_slice"] = bool(torch.equal(alone, full[1 : 1 + n]))
            row["tp8_invariant"] = bool(torch.equal(_fused(h, w, t, cfg, tp=8), full))
            row["max_abs_err"] = float((full.double() - ref64).abs().max())
            row["ms_median"] = measure.time_ms(lambda: _fused(h, w, t, cfg), h.device, warmup, reps)
            row["x_gemm"] = row["ms_median"] / gemm_ms
        except Exception as exc:  # a config Triton cannot compile is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out.append(row)
        print("sweep", row, flush=True)
        if on_row:
            on_row(out)
    return out
