"""Vocab-parallel selected log-probs over a real process group (NCCL on GPUs, gloo on CPU).

Each rank holds one vocab shard of the LM head (rank r: rows [r*V/tp, (r+1)*V/tp)), as Megatron's
ColumnParallelLinear output layer does.

- Megatron-native: all-reduce MAX of the shard maxima, then all-reduce SUM of the predicted logit
  and of the sums of exp (Megatron-Core's _VocabParallelCrossEntropy). The SUM's order is the
  collective's, so the result depends on the TP size.
- Fused: every rank computes its chunks' partials (fused_plan.py), the partials are all-gathered,
  and each rank merges all of them in chunk order: bitwise the TP=1 result.
- Fused with gradients (:func:`fused_vocab_parallel_logprobs`, the Megatron drop-in): the same
  forward; the backward computes the shard's grad_weight rows and its groups' grad_hidden partials,
  all-gathers the partials and adds all N_GROUPS in group order on every rank, so log-probs,
  grad_weight (each rank's shard) and grad_hidden are bitwise the TP=1 ones.

``timings`` (optional dict) receives per-call milliseconds of the collective part, for the
all-reduce share of the time.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.operators.fused_plan import merge_partials, shard_chunk_bounds, shard_group_bounds, sum_group_partials
from harness.operators.impl_fused import _partials_fn, shard_backward
from harness.operators.impl_megatron import shard_stats


class _Stopwatch:
    """Accumulates the time of the collective calls (CUDA events on GPU, perf_counter on CPU)."""

    def __init__(self, device, timings):
        self.device, self.timings, self.ms = device, timings, 0.0

    def __enter__(self):
        if self.timings is None:
            return self
        if self.device.type == "cuda":
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            import time

            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.timings is None:
            return
        if self.device.type == "cuda":
            self.end.record()
            self.end.synchronize()
            self.timings["collective_ms"] = self.timings.get("collective_ms", 0.0) + self.start.elapsed_time(self.end)
        else:
            import time

            self.timings["collective_ms"] = self.timings.get("collective_ms", 0.0) + (time.perf_counter() - self.t0) * 1e3


def megatron_vocab_parallel(hidden, weight_shard, targets, temperature=1.0, group=None, timings=None) -> torch.Tensor:
    rank = dist.get_rank(group)
    logits_max, finish = shard_stats(hidden, weight_shard, targets, temperature, rank * weight_shard.shape[0])
    with _Stopwatch(hidden.device, timings):
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
    predicted, sum_exp = finish(logits_max)
    with _Stopwatch(hidden.device, timings):
        dist.all_reduce(predicted, op=dist.ReduceOp.SUM, group=group)
        dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)
    return predicted - torch.log(sum_exp)


def fused_vocab_parallel(hidden, weight_shard, targets, temperature=1.0, group=None, timings=None) -> torch.Tensor:
    return _fused_forward_group(hidden, weight_shard, targets, temperature, group, timings)[0]


def _fused_forward_group(hidden, weight_shard, targets, temperature, group, timings=None):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    vocab = weight_shard.shape[0] * world
    start, local = shard_chunk_bounds(vocab, world, rank)
    m, s, z_t = _partials_fn(hidden.device, hidden.dtype)(hidden, weight_shard, targets - start, local, temperature)
    mine = torch.stack([m, s, z_t]).contiguous()  # [3, chunks on this rank, T]
    gathered = [torch.empty_like(mine) for _ in range(world)]
    with _Stopwatch(hidden.device, timings):
        dist.all_gather(gathered, mine, group=group)
    allp = torch.cat(gathered, dim=1)  # rank order == chunk order
    return merge_partials(allp[0], allp[1], allp[2])


class FusedVocabParallelLogprob(torch.autograd.Function):
    """Selected log-probs over a vocab-parallel LM head, with gradients bitwise equal to TP=1."""

    @staticmethod
    def forward(ctx, hidden, weight_shard, targets, temperature, group):
        logp, lse = _fused_forward_group(hidden, weight_shard, targets, temperature, group)
        ctx.save_for_backward(hidden, weight_shard, targets, lse)
        ctx.temperature, ctx.group = temperature, group
        return logp

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight_shard, targets, lse = ctx.saved_tensors
        group = ctx.group
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        vocab = weight_shard.shape[0] * world
        start, local = shard_group_bounds(vocab, world, rank)
        grad_w = torch.empty_like(weight_shard)
        mine = torch.stack(list(shard_backward(hidden, weight_shard, targets - start, lse, ctx.temperature, grad_out.contiguous(), local, grad_w)))
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine, group=group)
        grad_h = sum_group_partials(p for ranks in gathered for p in ranks)  # rank order == group order
        return grad_h.to(hidden.dtype), grad_w, None, None, None


def fused_vocab_parallel_logprobs(hidden, weight_shard, targets, temperature=1.0, group=None) -> torch.Tensor:
    """The Megatron drop-in: log_softmax(hidden @ W.T / T)[targets] with W split by vocab over ``group``.

    Megatron's vocab-parallel layout: rank r holds rows [r*V/tp, (r+1)*V/tp) of the output layer's
    weight (``weight_shard``); ``hidden`` [T, H] and ``targets`` [T] (global ids) are the same on
    every rank. Returns [T] fp32, the same on every rank. Gradients flow to ``hidden`` (already
    summed over the ranks: pass the hidden states directly, not through
    copy_to_tensor_model_parallel_region, which would sum them again) and to ``weight_shard``.
    """
    return FusedVocabParallelLogprob.apply(hidden, weight_shard, targets, float(temperature), group)
