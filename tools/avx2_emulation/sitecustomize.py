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

import importlib.abc
import os
import sys

# Named in every run's environment.json (harness.records.environment.ISA_SETTINGS), beside the
# oneDNN/ATen/OpenBLAS switches, so a figure made here is never taken for this machine's own.
os.environ.setdefault("VIME_LAB_CPU_EMULATION", "AVX2-only (tools/avx2_emulation)")


def _answer_as_avx2_only(cpu) -> None:
    cpu._is_avx512_supported = lambda: False
    cpu._is_avx512_bf16_supported = lambda: False
    cpu._is_amx_tile_supported = lambda: False


class _AfterTorchCpu(importlib.abc.MetaPathFinder):
    """Answers the CPU queries once torch.cpu is imported, by whoever imports torch: importing
    torch here would make every interpreter (the set-up's, a record's) pay for it."""

    def find_spec(self, name, path, target=None):
        if name != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_answer(module):
            exec_module(module)
            _answer_as_avx2_only(module)

        spec.loader.exec_module = exec_then_answer
        return spec


if "torch.cpu" in sys.modules:
    _answer_as_avx2_only(sys.modules["torch.cpu"])
else:
    sys.meta_path.insert(0, _AfterTorchCpu())
