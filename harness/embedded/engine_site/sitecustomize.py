"""Loaded by every Python process of the non-colocate vLLM server (its directory is put first on
PYTHONPATH by harness.embedded.engine_server): installs the fp8 activation emulation in whichever
process ends up running the engine, since vLLM spawns those processes from its own main module."""

import os

if os.environ.get("EMBEDDED_FP8_ACTIVATIONS") == "1":
    from harness.embedded import fp8

    fp8.install_activation_emulation()
