"""The Megatron side: a GPTModel on this rank's TP shard, its log-prob passes and its optimizer.

One forward serves both passes VIME runs: the no-grad recompute of old log-probs (with the
weights the engine just received) and the training forward. Response token ``j`` of a sample
with prompt length ``P`` is predicted by the logits at position ``P + j - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.embedded import bf16_gemm, logprob_operator, operator_calls
from harness.embedded import logprobs as lp
from harness.embedded.megatron_cpu import causal_mask, on_cpu
from harness.embedded.megatron_model import build_gpt, hf_to_megatron, load_into, megatron_to_hf
from harness.embedded.routing import RoutingReplay
from harness.embedded.true_on_policy import trainer_kernels
from harness.embedded.true_on_policy.logprobs import engine_logprobs
from harness.layout.token_shift import response_gather_positions


@dataclass(frozen=True)
class LogprobSpec:
    temperature: float
    top_k: int
    top_p: float
    replay: bool  # --embedded-replay-processed-logprobs
    target_shift: int = 0  # injected token-shift: 1
    slice_shift: int = 0  # injected mask-off-by-one: -1 (response slice read one position early)
    operator: str = "native"  # --embedded-logprob-operator (harness.embedded.logprob_operator)
    true_on_policy: bool = False  # --embedded-true-on-policy: log-probs as the engine computes them
    gather_row: bool = False  # lever trainer-engine-gather: the target read from a full log-prob row, as the engine reads it


def micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Greedy packing in order (VIME's dynamic batch size): padded tokens per batch <= max_tokens."""
    batches: list[list[int]] = [[]]
    width = 0
    for i, n in enumerate(lengths):
        new_width = max(width, n)
        if batches[-1] and new_width * (len(batches[-1]) + 1) > max_tokens:
            batches.append([])
            new_width = n
        batches[-1].append(i)
        width = new_width
    return batches


class Policy:
    def __init__(
        self,
        hf_config,
        hf_state: dict,
        *,
        bf16: bool,
        tp: int,
        tp_rank: int,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        clip_grad: float,
        true_on_policy: bool = False,
        lever_spec: bool = False,
    ) -> None:
        self.hf_config, self.tp, self.tp_rank, self.clip_grad = hf_config, tp, tp_rank, clip_grad
        self.bf16 = bf16
        # Which kernel adds the products of the bf16 GEMMs on this CPU (harness/embedded/bf16_gemm.py).
        self.gemm_route = bf16_gemm.route(bf16=bf16, true_on_policy=true_on_policy)
        # The lever layer spec (true_on_policy.layer_spec) wherever a trainer lever switch is on.
        self.model = build_gpt(hf_config, bf16=bf16, tp=tp, true_on_policy=true_on_policy or lever_spec)
        trainer_kernels.mark(self.model, hf_config)  # each linear's role, for the kernel levers (inert unless one is on)
        load_into(self.model, hf_to_megatron(hf_state, hf_config, tp, tp_rank))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # Megatron keeps fp32 main params for a bf16 model; AdamW steps those and copies back.
        self.main_params = [p.detach().float().clone().requires_grad_(False) for p in self.params] if bf16 else self.params
        self.optimizer = torch.optim.AdamW(self.main_params, lr=lr, betas=betas, weight_decay=weight_decay)
        self.pad_id = hf_config.pad_token_id or 0
        self.captured_hidden: torch.Tensor | None = None
        self.model.decoder.register_forward_hook(self._capture_hidden)
        self.routing = RoutingReplay(self.model)  # no routers on a dense model: a no-op

    def _capture_hidden(self, _module, _inputs, output) -> None:
        self.captured_hidden = output if isinstance(output, torch.Tensor) else output[0]

    @property
    def dtype_name(self) -> str:
        return "bfloat16" if self.bf16 else "float32"

    def forward_micro(self, seqs: list[tuple[list[int], int, int]], spec: LogprobSpec, *, grad: bool, diagnostics: bool = False, routed=None):
        """Per sample (tokens, prompt_len, response_len): log-probs [R] and, if asked, diagnostics
        and the final hidden states at the selected positions (before the LM head). ``routed``:
        per sample the rollout's routed experts, replayed by the MoE routers (R3); on an MoE model
        the experts each token used come back as ``extra["used_experts"]`` either way."""
        width = max(len(t) for t, _, _ in seqs) + 1  # +1: a shifted target never runs off the end
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for i, (t, _, _) in enumerate(seqs):
            ids[i, : len(t)] = torch.tensor(t)
        positions = torch.arange(width).unsqueeze(0).expand(len(seqs), -1)
        rows, cols, targets = [], [], []
        for i, (_, p, r) in enumerate(seqs):
            # The layout's token shift (logit t predicts token t+1), as the property tests check it.
            logit_cols, target_cols = response_gather_positions(p, r, spec.slice_shift, spec.target_shift)
            rows.extend([i] * r)
            cols.extend(logit_cols)
            targets.extend(ids[i, c].item() for c in target_cols)
        rows_t, cols_t, targets_t = torch.tensor(rows), torch.tensor(cols), torch.tensor(targets)
        context = torch.enable_grad() if grad else torch.no_grad()
        self.routing.begin()
        if routed is not None and self.routing.routers:
            self.routing.replay(routed, [len(t) for t, _, _ in seqs], width)
        with context, on_cpu(), bf16_gemm.context(self.gemm_route):
            try:
                logits = self.model(ids, positions, causal_mask(width))  # [b, s, V/tp]
            finally:
                self.routing.reset()
            selected = logits[rows_t, cols_t]  # [N, V/tp]
            fallback = 0
            if spec.operator != lp.NATIVE:
                # The operator on the LM head's own operands: the decoder's output at the selected
                # positions (in the autograd graph) and the output layer's weight shard.
                op = logprob_operator.resolve(spec.operator)
                values = logprob_operator.trainer_logprobs(
                    op, self.captured_hidden[cols_t, rows_t], self.output_weight_shard(), targets_t, spec.temperature, self.tp
                )
                ran = op.name
            elif spec.true_on_policy:
                values, outside = engine_logprobs(lp.gather_full_vocab(selected), targets_t, spec.temperature, spec.top_k, spec.top_p, spec.replay)
                fallback = int(outside.sum())
                ran = lp.TRUE_ON_POLICY
            elif spec.replay:
                full = lp.gather_full_vocab(selected)
                values, outside = lp.replay_logprobs(full, targets_t, spec.temperature, spec.top_k, spec.top_p)
                fallback = int(outside.sum())
                ran = lp.REPLAY
            else:
                values = lp.vocab_parallel_logprobs(selected, targets_t, spec.temperature, gather_row=spec.gather_row)
                ran = lp.NATIVE
            # Counted after the operator returned, with the tokens it returned (operator_calls.py):
            # the run's proof that this path ran, in this pass.
            operator_calls.count(operator_calls.TRAINER, operator_calls.TRAINING if grad else operator_calls.RECOMPUTE, ran, values.numel())
            extra = {"fallback_tokens": fallback}
            if diagnostics:
                with torch.no_grad():
                    full = lp.gather_full_vocab(selected.detach())
                    extra["diag"] = lp.token_diagnostics(full, targets_t, spec.temperature, spec.top_k, spec.top_p, self.tp)
                    hidden = self.captured_hidden.detach()  # [s, b, h]
                    extra["hidden"] = hidden[cols_t, rows_t]
                    extra["targets"] = targets_t
                    # This rank's vocab shard of the logits / T, fp32: the input of the vocab-parallel
                    # merge (probe 5 reads the probe samples' rows from each rank's dump).
                    extra["logits_shard"] = selected.detach().float() / spec.temperature
        sizes = [r for _, _, r in seqs]
        extra["split"] = sizes
        if self.routing.routers and self.routing.used:  # (the MLP lever's MoE path runs no Megatron router)
            extra["used_experts"] = [self.routing.used_experts(len(seqs), i, len(t)) for i, (t, _, _) in enumerate(seqs)]
        return list(torch.split(values, sizes)), extra

    def backward(self, loss: torch.Tensor) -> None:
        with bf16_gemm.context(self.gemm_route):
            loss.backward()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _finish_grads(self) -> float:
        """All-reduce the grads TP leaves partial, clip, and return the global grad norm."""
        from megatron.core import parallel_state

        group = parallel_state.get_tensor_model_parallel_group()
        sharded_sq = torch.zeros(())
        replicated_sq = torch.zeros(())
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            if self.tp > 1 and ("q_layernorm" in name or "k_layernorm" in name):
                # q/k norms are replicated but each rank only sees its own heads.
                torch.distributed.all_reduce(p.grad, group=group)
            sq = p.grad.float().pow(2).sum()
            if getattr(p, "tensor_model_parallel", False):
                sharded_sq += sq
            else:
                replicated_sq += sq
        if self.tp > 1:
            torch.distributed.all_reduce(sharded_sq, group=group)
        norm = float((sharded_sq + replicated_sq).sqrt())
        scale = min(1.0, self.clip_grad / (norm + 1e-6)) if self.clip_grad > 0 else 1.0
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(scale)
        return norm

    def optimizer_step(self) -> float:
        norm = self._finish_grads()
        if self.bf16:
            for main, p in zip(self.main_params, self.params):
                main.grad = None if p.grad is None else p.grad.float()
        self.optimizer.step()
        if self.bf16:
            with torch.no_grad():
                for main, p in zip(self.main_params, self.params):
                    p.copy_(main.to(p.dtype))
        self.zero_grad()
        return norm

    def shard_state(self) -> dict:
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}

    def full_hf_state(self) -> dict | None:
        """Every rank's shard, gathered; the HF state dict on TP rank 0, None elsewhere."""
        mine = self.shard_state()
        if self.tp == 1:
            return megatron_to_hf([mine], self.hf_config)
        shards: list = [None] * self.tp
        torch.distributed.all_gather_object(shards, mine)
        return megatron_to_hf(shards, self.hf_config) if self.tp_rank == 0 else None

    def output_weight_shard(self) -> torch.nn.Parameter:
        """This rank's rows of the LM head's weight (the output layer's, or the tied embedding's)."""
        name = "output_layer.weight" if not self.hf_config.tie_word_embeddings else "embedding.word_embeddings.weight"
        return dict(self.model.named_parameters())[name]

    def lm_head_weight(self) -> torch.Tensor:
        """The full (vocab-gathered) output-layer weight, for probe bundles."""
        name = "output_layer.weight" if not self.hf_config.tie_word_embeddings else "embedding.word_embeddings.weight"
        w = dict(self.model.named_parameters())[name].detach()
        if self.tp == 1:
            return w.clone()
        parts = [torch.empty_like(w) for _ in range(self.tp)]
        torch.distributed.all_gather(parts, w.contiguous())
        return torch.cat(parts, 0)
