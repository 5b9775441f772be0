"""The small, named shims that let Megatron-Core 0.16 run on a CPU-only machine.

Each one answers a CUDA-only call site Megatron-Core reaches on a CPU-only machine (docs/embedded.md):
- RoPE's ``get_emb`` and a few buffers call ``torch.cuda.current_device()`` to place tensors:
  while ``on_cpu()`` is active that call answers ``"cpu"``.
- the model-parallel RNG seed needs the inference RNG tracker (dropout is 0 here anyway);
- the default causal mask is built on CUDA: callers pass an explicit mask (``causal_mask``);
- MoE: ``moe_utils`` names its TransformerEngine fused ops only when TE imports, and then tests
  them against None: ``moe_without_te`` defines them as None (the router's own CUDA move is
  answered by ``on_cpu``).
Nothing else is patched; Megatron's DDP wrapper, optimizer factory and schedules are not used
(they do not run on CPU) — the trainer uses plain ``torch.optim.AdamW`` and its own loop.
"""

from __future__ import annotations

import contextlib
import datetime
import os

import torch


@contextlib.contextmanager
def on_cpu():
    """Answer Megatron's ``torch.cuda.current_device()`` placement calls with the CPU."""
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        yield
    finally:
        torch.cuda.current_device = original


_TE_MOE_OPS = (
    "fused_compute_score_for_moe_aux_loss",
    "fused_moe_aux_loss",
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function",
    "fused_unpermute",
    "te_general_gemm",
)


def moe_without_te() -> None:
    from megatron.core.transformer.moe import moe_utils

    if not moe_utils.HAVE_TE:
        for name in _TE_MOE_OPS:
            if not hasattr(moe_utils, name):
                setattr(moe_utils, name, None)


def init_distributed(rank: int, world_size: int, store_path: str) -> None:
    """A gloo world (TP=1: size 1; TP=2: two processes spawned by the trainer), rendezvous through a
    file (no TCP port to race other processes for), traffic on the loopback interface."""
    if torch.distributed.is_initialized():
        return
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = torch.distributed.FileStore(store_path, world_size)
    torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(minutes=10))


def init_model_parallel(tp: int, seed: int) -> None:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    with on_cpu():
        mp_random.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)


def causal_mask(seq_len: int) -> torch.Tensor:
    """Megatron's mask convention: True = masked out. Right padding needs nothing more."""
    return torch.triu(torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool), diagonal=1)
