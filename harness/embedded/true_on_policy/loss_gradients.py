"""The parameter gradients of one PPO-like loss on a batch: what the true-on-policy gradient test and
tools/true_on_policy_grad_probe.py both compare between the native and the shared-kernel paths."""

from __future__ import annotations

import torch


def ppo_loss_gradients(model, engine_log_softmax: bool, ids, targets, advantages) -> dict[str, torch.Tensor]:
    """-(log p(target) x advantage).mean() through `model` on `ids` (batch x tokens), its log-probs
    from the engine's log-softmax or Megatron's vocab-parallel one; each parameter's gradient in fp32."""
    from harness.embedded import logprobs as lp
    from harness.embedded.megatron_cpu import causal_mask, on_cpu
    from harness.embedded.true_on_policy.logprobs import engine_logprobs

    batch, tokens = ids.shape
    model.zero_grad(set_to_none=True)
    with on_cpu():
        logits = model(ids, torch.arange(tokens).expand(batch, -1), causal_mask(tokens)).reshape(batch * tokens, -1)
    if engine_log_softmax:
        values, _ = engine_logprobs(logits, targets, 1.0, -1, 1.0, replay=False)
    else:
        values = lp.vocab_parallel_logprobs(logits, targets, 1.0)
    (-(values * advantages).mean()).backward()
    return {n: p.grad.float().clone() for n, p in model.named_parameters()}
