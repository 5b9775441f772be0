"""The Triton kernel's logic (chunking, masking, target pick, TMA and pointer loops) on CPU.

Triton's interpreter (TRITON_INTERPRET=1) runs the kernel with numpy, so CI checks the kernel's
indexing against the torch version of the same plan; the bits of a real GPU run are the bench's job.
The interpreter must be chosen before triton compiles anything, hence a fresh interpreter process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.operator

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import torch
    from harness.operators.fused_plan import chunk_bounds, merge_partials, shard_chunk_bounds
    from harness.operators.fused_torch import torch_partials
    from harness.operators.fused_triton import KernelConfig, triton_partials
    gen = torch.Generator().manual_seed(0)
    T, H, V = 21, 64, 1000   # chunks of 125 columns: every chunk's last tile is masked
    h = torch.randn(T, H, generator=gen); w = torch.randn(V, H, generator=gen) * 0.1
    t = torch.randint(0, V, (T,), generator=gen)
    ref = torch.log_softmax((h.double() @ w.double().T) / 0.7, -1).gather(1, t[:, None]).squeeze(1)
    want = merge_partials(*torch_partials(h, w, t, chunk_bounds(V), 0.7))[0]
    for variant in ("nested", "tma_flatten"):
        cfg = KernelConfig(16, 32, 16, 4, 2, variant)
        got = merge_partials(*triton_partials(h, w, t, chunk_bounds(V), 0.7, cfg))[0]
        assert (got.double() - ref).abs().max() < 1e-5, (variant, (got.double() - ref).abs().max())
        assert (got - want).abs().max() < 1e-5, variant
        start, local = shard_chunk_bounds(V, 4, 2)   # rank 2 of TP=4: chunks 4 and 5
        m, s, z = triton_partials(h, w[start:start + V // 4], t - start, local, 0.7, cfg)
        full_m = triton_partials(h, w, t, chunk_bounds(V), 0.7, cfg)[0]
        assert torch.equal(m, full_m[4:6]), variant
    print("ok")
''')


def test_triton_kernel_matches_the_torch_plan_under_the_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
