"""One rollout: prompts -> vLLM samples -> rewards -> GRPO advantages (rank 0 only)."""

from __future__ import annotations

from harness.embedded.data import Prompt
from harness.embedded.engine import SamplingSpec
from harness.embedded.grpo import grpo_advantages
from harness.embedded.reward import deepscaler
from harness.embedded.samples import Sample, fingerprint


def prompt_batch(prompts: list[Prompt], rollout_id: int, batch_size: int) -> list[Prompt]:
    start = rollout_id * batch_size
    return [prompts[(start + i) % len(prompts)] for i in range(batch_size)]


def collect(engine, tokenizer, batch: list[Prompt], spec: SamplingSpec, *, tokenizer_hash: str, std_normalise: bool) -> list[Sample]:
    groups = engine.generate([p.ids for p in batch], spec)
    samples: list[Sample] = []
    for g, (prompt, completions) in enumerate(zip(batch, groups)):
        for c in completions:
            text = tokenizer.decode(c.token_ids, skip_special_tokens=False)
            samples.append(
                Sample(
                    index=len(samples),
                    group_index=g,
                    prompt_ids=list(prompt.ids),
                    response_ids=c.token_ids,
                    rollout_log_probs=c.logprobs,
                    rollout_ranks=c.ranks,
                    loss_mask=[1] * len(c.token_ids),
                    label=prompt.label,
                    response_text=text,
                    finish_reason=c.finish_reason,
                    rollout_weight_version=c.weight_version,
                    reward=deepscaler(text, prompt.label),
                    rollout_routed_experts=c.routed_experts,
                )
            )
    advantages = grpo_advantages([s.reward for s in samples], spec.n, std_normalise)
    for s, a in zip(samples, advantages):
        s.advantage = a
        s.rollout_fingerprint = fingerprint(
            token_ids=s.tokens,
            response_ids=s.response_ids,
            loss_mask=s.loss_mask,
            sampling=spec.as_dict(),
            tokenizer_hash=tokenizer_hash,
            weight_version=s.rollout_weight_version,
            dp_rank=0,
            micro_batch=None,
            offset=s.index,
        )
    return samples
