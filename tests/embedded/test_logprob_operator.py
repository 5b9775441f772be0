"""--embedded-logprob-operator: choosing the operator (one line per bad NAME) and what each engine's
side computes with it, against the float64 reference on the same operands (no embedded run)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.embedded import flags, logprob_operator, settings
from harness.operators import registry
from harness.operators.impl_reference import reference_logprobs
from harness.operators.sampling_filters import apply_top_k_top_p

FUSED = "fused-linear-logprob"
BASE = ["--hf-checkpoint", "m", "--prompt-data", "d", "--num-rollout", "3", "--rollout-batch-size", "2"]


def _settings(*extra: str):
    values, _ = flags.parse(BASE + list(extra))
    return settings.from_flags(values)


def test_default_keeps_each_engines_native_path():
    assert _settings().logprob_operator == logprob_operator.NATIVE
    assert logprob_operator.resolve(logprob_operator.NATIVE) is None
    assert flags.BY_NAME["embedded-logprob-operator"].honoured


def test_the_fused_operator_is_accepted():
    assert _settings("--embedded-logprob-operator", FUSED).logprob_operator == FUSED
    assert FUSED in logprob_operator.usable_names()


@pytest.mark.parametrize(
    "name, words",
    [
        ("fused-linear-logprb", "no such operator"),
        ("megatron-native", "no backward"),
        ("vllm-processed", "contract is 'processed'"),
    ],
)
def test_unusable_names_give_one_line(name, words):
    with pytest.raises(flags.FlagError) as err:
        _settings("--embedded-logprob-operator", name)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"--embedded-logprob-operator {name}: ") and words in message
    # The usable names are listed, whatever else is installed (an operator plug-in adds its own).
    listed = message.split("expected native or one of ", 1)[1].split(", ")
    assert FUSED in listed and set(listed) == set(logprob_operator.usable_names()), message


def test_operator_and_replay_are_exclusive():
    with pytest.raises(flags.FlagError, match="choose one"):
        _settings("--embedded-logprob-operator", FUSED, "--embedded-replay-processed-logprobs")


def _operands(rows=24, hidden=16, vocab=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=gen).to(torch.bfloat16)
    w = (torch.randn(vocab, hidden, generator=gen) / 2).to(torch.bfloat16)
    return h, w, torch.randint(0, vocab, (rows,), generator=gen)


def test_trainer_side_is_the_operator_with_its_gradients():
    h, w, targets = _operands()
    op = registry.get(FUSED)
    hidden, weight = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    values = logprob_operator.trainer_logprobs(op, hidden, weight, targets, 0.8, tp=1)
    torch.testing.assert_close(values.double(), reference_logprobs(h, w, targets, 0.8), atol=1e-5, rtol=0)
    values.sum().backward()
    h64, w64 = h.double().requires_grad_(True), w.double().requires_grad_(True)
    torch.log_softmax(h64 @ w64.T / 0.8, dim=-1).gather(1, targets[:, None]).sum().backward()
    torch.testing.assert_close(weight.grad.double(), w64.grad, atol=2e-2, rtol=2e-2)  # bf16 gradients
    torch.testing.assert_close(hidden.grad.double(), h64.grad, atol=2e-2, rtol=2e-2)


def _vllm_logprobs(h, w, temperature, mode, top_k=None):
    """What vLLM's sampler hands to gather_logprobs: raw (no temperature) or processed log-probs."""
    logits = (h @ w.T).float()  # vLLM's LM head in the model dtype, upcast for sampling
    if mode == "raw_logprobs":
        return logits.log_softmax(-1), logits
    scaled = logits / temperature
    if top_k is not None:
        scaled, _ = apply_top_k_top_p(scaled, top_k, None)
    return scaled.log_softmax(-1), logits


@pytest.mark.parametrize("mode, top_k", [("raw_logprobs", None), ("processed_logprobs", None), ("processed_logprobs", 8)])
def test_rollout_side_keeps_the_contract_vllm_was_asked_for(mode, top_k):
    h, w, _ = _operands()
    temperature = 0.7
    vllm_lp, logits = _vllm_logprobs(h, w, temperature, mode, top_k)
    sampled = vllm_lp.argmax(-1)  # any kept token
    meta = SimpleNamespace(temperature=torch.full((h.shape[0],), temperature))
    logprob_operator._LAST.update(hidden=h, weight=w, meta=meta, mode=mode, logits=logits.clone())
    try:
        values = logprob_operator.rollout_logprobs(registry.get(FUSED), vllm_lp, sampled)
    finally:
        logprob_operator._LAST.clear()
    reference = reference_logprobs(h, w, sampled, 1.0 if mode == "raw_logprobs" else temperature, top_k)
    # The operator's fp32 logits against fp64; with filters, vLLM's own kept-mass term from bf16 logits.
    torch.testing.assert_close(values.double(), reference, atol=5e-3 if top_k else 1e-5, rtol=0)
    native = vllm_lp.gather(1, sampled[:, None]).squeeze(1).double()
    assert not torch.equal(values.double(), native)  # the operator's arithmetic, not vLLM's values passed through


def test_rollout_side_refuses_rows_it_cannot_pair():
    h, w, _ = _operands()
    vllm_lp, logits = _vllm_logprobs(h, w, 1.0, "processed_logprobs")
    logprob_operator._LAST.update(hidden=h[:-1], weight=w, meta=SimpleNamespace(temperature=None), mode="processed_logprobs", logits=logits)
    try:
        with pytest.raises(RuntimeError, match="cannot pair them"):
            logprob_operator.rollout_logprobs(registry.get(FUSED), vllm_lp, vllm_lp.argmax(-1))
    finally:
        logprob_operator._LAST.clear()


def test_each_operator_call_is_counted_where_it_runs():
    """The proof of execution is a count taken after the call returned (operator_calls.py): the
    rollout side's operator adds its calls and tokens; the boundary capture's calls are kept apart."""
    from harness.embedded import operator_calls

    h, w, _ = _operands()
    vllm_lp, logits = _vllm_logprobs(h, w, 1.0, "raw_logprobs")
    before = operator_calls.snapshot(operator_calls.ROLLOUT)["passes"]
    sampler = before.get("sampler", {}).get(FUSED, {"calls": 0, "tokens": 0})
    for capturing in (False, True):
        operator_calls.capturing(capturing)
        logprob_operator._LAST.update(hidden=h, weight=w, meta=SimpleNamespace(temperature=None), mode="raw_logprobs", logits=logits)
        try:
            logprob_operator.rollout_logprobs(registry.get(FUSED), vllm_lp, vllm_lp.argmax(-1))
        finally:
            logprob_operator._LAST.clear()
            operator_calls.capturing(False)
    after = operator_calls.snapshot(operator_calls.ROLLOUT)["passes"]
    assert after["sampler"][FUSED] == {"calls": sampler["calls"] + 1, "tokens": sampler["tokens"] + h.shape[0]}
    assert after["capture"][FUSED]["tokens"] >= h.shape[0]


@pytest.mark.parametrize(
    "extra, trainer, rollout",
    [
        ((), "native", "native"),
        (("--embedded-logprob-operator", FUSED), FUSED, FUSED),
        (("--embedded-true-on-policy", "--embedded-replay-processed-logprobs"), "true-on-policy", "native"),
    ],
)
def test_what_each_side_must_be_counted_running(extra, trainer, rollout):
    from harness.embedded import true_on_policy as mode
    from harness.embedded.loop import expected_operators

    held = mode.active()
    mode.configure(frozenset())
    try:
        wanted = {(e["side"], e["pass"]): e["operator"] for e in expected_operators(_settings(*extra))}
    finally:
        mode.configure(held)  # the process's switches are every later test's: a leaked empty set un-aligns their models
    assert wanted[("trainer", "recompute")] == wanted[("trainer", "training")] == trainer
    assert wanted[("rollout", "sampler")] == rollout
    assert (("rollout", "engine-norm") in wanted) == ("--embedded-true-on-policy" in extra)
