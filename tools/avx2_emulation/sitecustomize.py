"""An AVX2-only CPU's kernel routes on an AVX-512 machine, for judging and timing as one would.

Put this directory first on PYTHONPATH, with oneDNN limited to AVX2 (docs/machines.md):

    PYTHONPATH=tools/avx2_emulation ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \\
        OPENBLAS_CORETYPE=Haswell make baseline

What an AVX2-only CPU changes, and how each is reproduced here:
- PyTorch's bf16 GEMM: oneDNN reports no bf16 below AVX-512, so ATen takes its own fallback GEMM.
  ``ONEDNN_MAX_CPU_ISA=AVX2`` alone does this (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``
  then answers False).
- vLLM's kernel library: vLLM loads ``_C_AVX2`` when ``torch.cpu._is_avx512_supported()`` is False
  and ``_C`` (AMX, AVX-512 bf16) otherwise; with oneDNN limited to AVX2, ``_C``'s bf16 GEMM aborts.
  The three CPU queries vLLM asks are answered as an AVX2-only CPU answers them, so it loads
  ``_C_AVX2``, picks its AVX2 attention path, and its oneDNN linear falls back to
  ``torch.nn.functional.linear`` (vLLM logs "Failed to create oneDNN linear"), as on such a CPU.
- ATen's vectorised kernels and OpenBLAS: ``ATEN_CPU_CAPABILITY``, ``OPENBLAS_CORETYPE``.
Not reproduced: the AVX2 CPU's own speed and its instruction timings. A time measured here shows
what the kernel routes cost, not an AVX2-only machine's wall time.

The non-colocate server's processes put harness/embedded/engine_site first on PYTHONPATH; its
sitecustomize runs this one after its own.
"""

import os

try:
    import torch
except ImportError:  # an interpreter without torch (the system python3 that runs the set-up)
    torch = None

# Named in every run's environment.json (harness.records.environment.ISA_SETTINGS), beside the
# oneDNN/ATen/OpenBLAS switches, so a figure made here is never taken for this machine's own.
os.environ.setdefault("VIME_LAB_CPU_EMULATION", "AVX2-only (tools/avx2_emulation)")

if torch is not None:
    torch.cpu._is_avx512_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False
    torch.cpu._is_amx_tile_supported = lambda: False
