"""``--embedded-logprob-operator NAME``: one selected-log-prob operator in both engines.

NAME is an operator of the registry (harness/operators/registry.py); ``native`` (the default)
keeps each engine's own path (Megatron's vocab-parallel cross entropy, vLLM's ``log_softmax``).
The operator computes ``log_softmax(hidden @ weight.T / T)[target]`` from the LM head's operands,
so the LM-head GEMM and the log-sum-exp are both its arithmetic.

- Trainer (recompute and training pass): the decoder's output (after the final norm, the LM
  head's input) and the output layer's weight, gathered over TP; the operator runs its own
  vocab-parallel plan with ``tp_size`` = TP, and the weight's gradient flows back to each rank's
  shard.
- Rollout: inside vLLM's sampler (``install_in_vllm``). vLLM still computes its logits and samples
  from them, so the sampled tokens are vLLM's; the log-prob returned for the sampled token is the
  operator's, on the hidden states vLLM fed its LM head and vLLM's LM-head weight, under the
  contract vLLM was asked for: ``raw_logprobs`` at temperature 1 (taken before temperature),
  ``processed_logprobs`` at the row's temperature. Where top-k/top-p removed tokens, the processed
  contract renormalises over the kept set; the operator's contract is the full vocabulary, so the
  kept-mass term log(M) = raw_T - processed stays vLLM's own (same logits, same ops as its sampler)
  and the operator supplies raw_T. The contract is unchanged; only the arithmetic of raw_T moves.

The rollout side is installed in whichever process runs the engine: ``install_from_env`` reads
``ENV_FLAG`` (set by the trainer before the engine starts; the non-colocate server's processes
through engine_site/sitecustomize.py).
"""

from __future__ import annotations

import os

import torch

from harness.embedded import operator_calls

NATIVE = "native"
ENV_FLAG = "EMBEDDED_LOGPROB_OPERATOR"
_SAMPLING_EPS = 1e-5  # vLLM's: a row below it is greedy (its sampler divides by 1 there)


class OperatorChoiceError(ValueError):
    """A NAME the embedded trainer cannot use; the message is one line for the user."""


def usable_names() -> list[str]:
    """Registry operators both engines can run here: available, raw contract, with a backward."""
    from harness.operators import registry

    return [n for n in registry.names() if not _why_unusable(registry.get(n))]


def _why_unusable(op) -> str:
    ok, why = op.available()
    if not ok:
        return f"cannot run here ({why})"
    if op.contract.semantics != "raw":
        return f"its contract is {op.contract.semantics!r} log-probs; both engines need the raw log-softmax (the run's contract is applied around it)"
    if not op.contract.has_backward:
        return "it has no backward, and the trainer's training pass needs the gradient"
    return ""


def resolve(name: str | None):
    """The operator for NAME (None for native), or OperatorChoiceError with one line."""
    if name in (None, NATIVE):
        return None
    from harness.operators import registry

    flag = f"--embedded-logprob-operator {name}"
    if name not in registry.names():
        raise OperatorChoiceError(f"{flag}: no such operator; expected {NATIVE} or one of {', '.join(usable_names())}")
    op = registry.get(name)
    why = _why_unusable(op)
    if why:
        raise OperatorChoiceError(f"{flag}: {why}; expected {NATIVE} or one of {', '.join(usable_names())}")
    return op


# ---------------------------------------------------------------- trainer side
def trainer_logprobs(op, hidden: torch.Tensor, weight_shard: torch.Tensor, targets: torch.Tensor, temperature: float, tp: int) -> torch.Tensor:
    """Selected log-probs [N] fp32 on this rank (every rank computes all N, as the vocab-parallel
    cross entropy does). ``hidden`` [N, H] and ``weight_shard`` [V/tp, H] keep their autograd graph."""
    weight = weight_shard
    if tp > 1:
        from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

        # Rows gathered in rank order; backward keeps this rank's rows of the gradient (every rank
        # computed the whole gradient, so no reduction).
        weight = gather_from_sequence_parallel_region(weight_shard, tensor_parallel_output_grad=False)
    return op.selected_logprobs(hidden, weight, targets, temperature, tp_size=tp)


# ---------------------------------------------------------------- rollout side (inside vLLM)
_LAST: dict = {}  # the sampler call in flight: LM-head operands, metadata, logits before sampling


def install_in_vllm(name: str) -> None:
    """Route vLLM's sampled-token log-prob through the operator NAME (idempotent). ``native``
    leaves vLLM's own log-probs in place and only counts them (operator_calls.py): every engine
    process counts which operator produced the log-probs it returned."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.v1.sample.sampler import Sampler

    installed = getattr(Sampler, "_embedded_logprob_operator", None)
    if installed == name:
        return
    if installed is not None:
        raise RuntimeError(f"vLLM's sampler already routes log-probs through {installed!r}; cannot switch to {name!r} in one process")
    op = resolve(name)
    lp_forward, forward, gather = LogitsProcessor.forward, Sampler.forward, Sampler.gather_logprobs

    def logits_forward(self, lm_head, hidden_states, *args, **kwargs):
        logits = lp_forward(self, lm_head, hidden_states, *args, **kwargs)
        _LAST["hidden"], _LAST["weight"] = hidden_states, lm_head.weight
        return logits

    def sampler_forward(self, logits, sampling_metadata, *args, **kwargs):
        override = kwargs.get("logprobs_mode_override", args[1] if len(args) > 1 else None)
        _LAST.update(meta=sampling_metadata, mode=override or self.logprobs_mode)
        if op is not None:
            _LAST["logits"] = logits.float().clone()
        try:
            return forward(self, logits, sampling_metadata, *args, **kwargs)
        finally:
            for key in ("meta", "mode", "logits", "hidden", "weight"):
                _LAST.pop(key, None)

    def gather_logprobs(logprobs, num_logprobs, token_ids):
        out = gather(logprobs, num_logprobs, token_ids)
        if "meta" in _LAST:  # the sampled-token path (prompt log-probs are not asked for)
            if op is not None:
                out.logprobs[:, 0] = rollout_logprobs(op, logprobs, token_ids)  # counted per operator call
            else:
                operator_calls.count(operator_calls.ROLLOUT, operator_calls.SAMPLER, NATIVE, out.logprobs.shape[0])
        return out

    if op is not None:  # the LM head's operands are needed by the operator only
        LogitsProcessor.forward = logits_forward
    Sampler.forward = sampler_forward
    Sampler.gather_logprobs = staticmethod(gather_logprobs)
    Sampler._embedded_logprob_operator = name


def rollout_logprobs(op, vllm_logprobs: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
    """The sampled tokens' log-probs by the operator, under the contract of ``vllm_logprobs``."""
    hidden, weight, meta, mode = _LAST.get("hidden"), _LAST.get("weight"), _LAST["meta"], _LAST["mode"]
    rows, vocab = vllm_logprobs.shape
    if hidden is None or hidden.shape[0] != rows:
        got = None if hidden is None else hidden.shape[0]
        raise RuntimeError(f"embedded log-prob operator: the LM head saw {got} rows, the sampler {rows}; cannot pair them")
    if mode not in ("raw_logprobs", "processed_logprobs"):
        raise RuntimeError(f"embedded log-prob operator: vLLM logprobs mode {mode!r} is not a log-prob contract")
    temps = torch.ones(rows, dtype=torch.float32)
    if mode == "processed_logprobs" and meta.temperature is not None:
        temps = torch.where(meta.temperature.float().cpu() < _SAMPLING_EPS, 1.0, meta.temperature.float().cpu())
    values = torch.empty(rows, dtype=torch.float32)
    for t in torch.unique(temps).tolist():
        idx = (temps == t).nonzero().squeeze(1)
        values[idx] = op.selected_logprobs(hidden[idx], weight[:vocab], sampled[idx], float(t), tp_size=1).float()
        operator_calls.count(operator_calls.ROLLOUT, operator_calls.SAMPLER, op.name, idx.numel())  # after it returned
    filtered = ~torch.isfinite(vllm_logprobs).all(dim=1)
    if mode == "processed_logprobs" and bool(filtered.any()):
        # vLLM's own kept-mass term: its raw log-prob at T (same logits, same division and
        # log_softmax as its sampler) minus its processed one.
        raw_t = (_LAST["logits"][filtered] / temps[filtered, None]).log_softmax(dim=-1)
        pick = sampled[filtered, None]
        values[filtered] -= (raw_t.gather(1, pick) - vllm_logprobs[filtered].gather(1, pick)).squeeze(1)
    return values


def install_from_env() -> None:
    """In an engine process the trainer started (ENV_FLAG set, ``native`` included: native is counted too)."""
    name = os.environ.get(ENV_FLAG)
    if name:
        install_in_vllm(name)
