"""Which CPU numerics a machine computes with: its vector ISA and the switches that change it.

Numerics and speed differ between the two x86 kinds this project runs on (AVX-512, AVX2 only), so
every record that carries a figure names which one made it (harness.records.environment), and an
embedded run's id includes it (harness.spec.resolve): a run made under other numerics is another run.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

# The switches that move an AVX-512 machine towards an AVX2-only CPU's numerics (../shared/facts/machines.md):
# a run made under them is not a run of the machine's own kernels, so the record says so.
# VIME_LAB_CPU_EMULATION is set by tools/avx2_emulation (vLLM's kernel library as on an AVX2-only CPU).
ISA_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "VIME_LAB_CPU_EMULATION")


def cpu_isa(cpuinfo: str | None = None, environ=None) -> dict:
    """The vector instruction set the CPU offers (AVX-512 / AVX2 only / other) and the ISA switches set.

    Numerics and speed differ between the two x86 kinds this project runs on, so every record that
    carries a figure names which one made it."""
    environ = os.environ if environ is None else environ
    if cpuinfo is None:
        cpuinfo = _cpuinfo()
    match = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set(match.group(1).split()) if match else set()
    if not flags:
        isa = None
    elif any(flag.startswith("avx512") for flag in flags):
        isa = "AVX-512" + (" + AMX" if any(flag.startswith("amx") for flag in flags) else "")
    elif "avx2" in flags:
        isa = "AVX2 only"
    else:
        isa = "no AVX2"
    settings = {name: environ[name] for name in ISA_SETTINGS if environ.get(name)}
    return {"isa": isa, "isa_settings": settings}


@lru_cache(maxsize=1)
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
