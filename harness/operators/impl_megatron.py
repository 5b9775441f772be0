"""Megatron-native: bf16 LM-head GEMM per vocab shard, fp32 vocab-parallel log-softmax.

The arithmetic is Megatron-Core's ``VocabParallelCrossEntropy`` (calculate_logits_max,
calculate_predicted_logits, calculate_cross_entropy_loss), called from megatron-core when it is
importable and transcribed otherwise (the H200 image has no megatron-core; the transcription is
checked against upstream bitwise in tests/operators/test_parity_with_upstream.py). The TP
all-reduces (MAX of the max, SUM of the sums of exp and of the predicted logit) run in-process here,
in rank order; harness/operators/vocab_parallel.py runs them over a real process group.
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator
from harness.operators.registry import register


class _TranscribedVocabParallelCE:
    """Megatron-Core 0.16 ``VocabParallelCrossEntropy`` static methods, line for line."""

    @staticmethod
    def calculate_logits_max(vocab_parallel_logits):
        vocab_parallel_logits = vocab_parallel_logits.float()
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        return vocab_parallel_logits, logits_max

    @staticmethod
    def calculate_predicted_logits(vocab_parallel_logits, target, logits_max, vocab_start_index, vocab_end_index):
        vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0
        partition_vocab_size = vocab_parallel_logits.size()[-1]
        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        exp_logits = vocab_parallel_logits
        torch.exp(vocab_parallel_logits, out=exp_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        return target_mask, masked_target_1d, predicted_logits, sum_exp_logits, exp_logits


def vocab_parallel_ce():
    """(the VocabParallelCrossEntropy class to use, where it came from)."""
    try:
        from megatron.core.tensor_parallel.cross_entropy import VocabParallelCrossEntropy
    except Exception:  # megatron-core absent (the H200 image) or not importable
        return _TranscribedVocabParallelCE, "transcribed megatron-core 0.16 VocabParallelCrossEntropy"
    return VocabParallelCrossEntropy, "megatron.core.tensor_parallel.cross_entropy.VocabParallelCrossEntropy"


def shard_logits(hidden: torch.Tensor, weight_shard: torch.Tensor, temperature: float) -> torch.Tensor:
    """The shard's logits as Megatron's output layer makes them: GEMM in the operand dtype, then / T."""
    logits = hidden @ weight_shard.T
    if temperature != 1.0:
        logits = logits / temperature  # still bf16, as Megatron divides before the fp32 upcast
    return logits


def shard_stats(hidden, weight_shard, targets, temperature, vocab_start):
    """One rank's part: (logits_max [T], and a closure giving (predicted [T], sum_exp [T]) for a max)."""
    ce, _ = vocab_parallel_ce()
    logits, logits_max = ce.calculate_logits_max(shard_logits(hidden, weight_shard, temperature))
    vocab_end = vocab_start + weight_shard.shape[0]

    def finish(global_max):
        _, _, predicted, sum_exp, _ = ce.calculate_predicted_logits(logits, targets, global_max, vocab_start, vocab_end)
        return predicted, sum_exp

    return logits_max, finish


@register("megatron-native")
class MegatronNative(Operator):
    contract = Contract(
        summary="Megatron: bf16 GEMM per vocab shard, fp32 max/exp/sum, all-reduce MAX then SUM over TP",
        operand_dtype="bfloat16",
        accumulate_dtype="float32 (cuBLAS), output rounded to bf16",
        logits_dtype="bfloat16, upcast to float32",
        rounds_at=["logits to bf16 at the GEMM output", "logits / T in bf16", "fp32 exp and sums"],
        reduction_order="per shard: torch max and sum over the shard; across shards: all-reduce (here rank order)",
        tp_handling="vocab-parallel: each shard's sum of exp is a separate partial, summed by the all-reduce",
        batch_invariant_by_design=False,
        tp_invariant_by_design=False,
        requires=[],
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        shard = weight.shape[0] // tp_size
        ranks = [shard_stats(hidden, weight[r * shard : (r + 1) * shard], targets, temperature, r * shard) for r in range(tp_size)]
        global_max = ranks[0][0]
        for logits_max, _ in ranks[1:]:
            global_max = torch.maximum(global_max, logits_max)  # all-reduce MAX
        predicted, sum_exp = ranks[0][1](global_max)
        for _, finish in ranks[1:]:
            p, s = finish(global_max)
            predicted, sum_exp = predicted + p, sum_exp + s  # all-reduce SUM, rank order
        # Megatron's loss is log(sum_exp) - predicted; the log-prob is its negative.
        return predicted - torch.log(sum_exp)
