"""fp32 logits in row chunks: the smallest honest operator, written as a kernel author's plug-in would be.

It computes ``log_softmax(hidden @ weight.T / T)[target]`` with the GEMM in fp32 (the bf16 operands
upcast) over chunks of ``ROW_CHUNK`` rows, so a [T, V] tensor never exists at once. Plain torch ops:
autograd gives the backward, and it runs wherever torch does (the embedded trainer's CPU, a GPU).
It is not batch invariant by design (torch's GEMM picks its kernel by shape) and says so in its
contract; the bench measures what it actually does.
"""

from __future__ import annotations

import torch

from harness.operators.contract import Contract, Operator

ROW_CHUNK = 256


class ChunkedFp32Logprob(Operator):
    contract = Contract(
        summary="Example plug-in: fp32 GEMM on upcast operands, log_softmax per chunk of 256 rows (torch, autograd backward)",
        operand_dtype="float32 (bf16 operands upcast exactly)",
        accumulate_dtype="float32",
        logits_dtype="float32, one chunk of 256 rows at a time",
        rounds_at=["fp32 GEMM accumulation", "fp32 / T", "fp32 log_softmax", "gradients returned in the operands' dtype"],
        reduction_order="torch.log_softmax over the whole vocabulary per row; TP shards: per-shard max and sum of exp, combined in rank order",
        tp_handling="tp_size shards of the vocabulary in this process: per-shard max, all-reduce-max, per-shard sum of exp, summed in rank order",
        batch_invariant_by_design=False,
        tp_invariant_by_design=False,
        has_backward=True,
        requires=[],
    )

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        out = []
        w = weight.float()
        for start in range(0, hidden.shape[0], ROW_CHUNK):
            h = hidden[start : start + ROW_CHUNK].float()
            t = targets[start : start + ROW_CHUNK]
            if tp_size == 1:
                logp = torch.log_softmax((h @ w.T) / temperature, dim=-1)
                out.append(logp.gather(1, t[:, None]).squeeze(1))
                continue
            shards = [(h @ s.T) / temperature for s in w.chunk(tp_size)]  # rank r holds rows [r*V/tp, (r+1)*V/tp)
            m = torch.stack([z.max(dim=-1).values for z in shards]).max(dim=0).values
            total = sum(torch.exp(z - m[:, None]).sum(dim=-1) for z in shards)
            picked = torch.cat(shards, dim=-1).gather(1, t[:, None]).squeeze(1)
            out.append(picked - m - torch.log(total))
        return torch.cat(out)
