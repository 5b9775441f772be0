"""The trainer-side kernel patches at once: the dense layers' (trainer_kernels) and, on an MoE layer,
the router's and experts' through vLLM's MoE ops (moe_kernel, which builds on the dense ones' weight
helpers, so it imports trainer_kernels and never the other way round)."""

from __future__ import annotations

from harness.embedded.true_on_policy import moe_kernel, trainer_kernels


def install() -> None:
    """Patch Megatron's linears, word embedding and MoE layers (idempotent), after the run's numerical controls."""
    trainer_kernels.install()
    moe_kernel.install()  # the MLP lever on an MoE layer: router and experts through vLLM's MoE ops


def install_if_needed(on) -> None:
    """Install the patches when a switch that needs them is on (a native run keeps Megatron's classes as they are)."""
    if set(on) & set(trainer_kernels.KERNEL_SWITCHES):
        install()
