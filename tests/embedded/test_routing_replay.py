"""Rollout routing replay (R3) on the tiny MoE: the trainer dispatches every token to the experts
the rollout chose, in the log-prob recompute and in the training forward.

The property runs Megatron-Core's router replay on random batches and random expert choices (no
engine); the run checks the whole path: vLLM's routing captured in the engine, kept in the dump
as VIME keeps it, replayed by the trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import BASE_ARGS, assert_finished, refused_in_one_line
from harness.embedded.policy import LogprobSpec, Policy
from harness.records.metric_names import ABS_DIFF

SPEC = LogprobSpec(temperature=1.0, top_k=-1, top_p=1.0, replay=False)


@pytest.fixture(scope="module")
def moe_policy(tmp_path_factory):
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from harness.embedded.factory import ensure_model
    from harness.embedded.megatron_cpu import init_distributed, init_model_parallel

    path = ensure_model("qwen3-moe-tiny")
    config = AutoConfig.from_pretrained(path)
    init_distributed(0, 1, str(tmp_path_factory.mktemp("store") / "store"))
    init_model_parallel(1, 0)
    policy = Policy(
        config, load_file(str(path / "model.safetensors")), bf16=True, tp=1, tp_rank=0, lr=1e-4, betas=(0.9, 0.98), weight_decay=0.0, clip_grad=1.0
    )
    return policy, config


@st.composite
def batches(draw, experts: int = 8, layers: int = 2, topk: int = 2):
    """1-3 sequences (prompt + response tokens) and, per forwarded token and MoE layer, top-k
    distinct expert ids: what a rollout engine could have routed."""
    seqs, routed = [], []
    for _ in range(draw(st.integers(1, 3))):
        length = draw(st.integers(3, 24))
        prompt = draw(st.integers(1, length - 1))
        tokens = draw(st.lists(st.integers(1, 383), min_size=length, max_size=length))
        seed = draw(st.integers(0, 2**31 - 1))
        gen = torch.Generator().manual_seed(seed)
        ids = torch.stack([torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(layers)]) for _ in range(length - 1)])
        seqs.append((tokens, prompt, length - prompt))
        routed.append(ids.numpy().astype(np.uint8))
    return seqs, routed


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=batches(), grad=st.booleans())
def test_with_routing_replay_every_token_uses_the_rollouts_experts(moe_policy, batch, grad):
    policy, _ = moe_policy
    seqs, routed = batch
    _, extra = policy.forward_micro(seqs, SPEC, grad=grad, routed=routed)
    for i, (tokens, _, _) in enumerate(seqs):
        used = extra["used_experts"][i].numpy()
        assert used.shape == (len(tokens) - 1, 2, 2)
        assert np.array_equal(used, np.sort(routed[i].astype(np.int64), axis=-1)), f"sequence {i}: the routers did not replay the rollout's experts"
    policy.zero_grad()


def test_without_replay_the_routers_choose_their_own_experts(moe_policy):
    """The control: replay switched off after a replayed forward, the routers are back to their own
    top-k (the same choice twice, and not the arbitrary one replayed before)."""
    policy, _ = moe_policy
    seqs = [(list(range(5, 25)), 6, 14)]
    forced = [np.tile(np.array([[6, 7], [6, 7]], dtype=np.uint8), (19, 1, 1))]
    policy.forward_micro(seqs, SPEC, grad=False, routed=forced)
    _, first = policy.forward_micro(seqs, SPEC, grad=False)
    _, second = policy.forward_micro(seqs, SPEC, grad=False)
    assert torch.equal(first["used_experts"][0], second["used_experts"][0])
    assert not np.array_equal(first["used_experts"][0].numpy(), np.sort(forced[0].astype(np.int64), axis=-1))


def test_routing_replay_run_keeps_vimes_dump_and_replays_the_engines_routing(trainer, thresholds):
    """fp32 both sides on the MoE, R3 on: the rollout dump keeps rollout_routed_experts
    [tokens - 1, layers, top-k] per sample, the recompute dispatched every token to those experts,
    and the drift stays at the fp32 floor (a capture misaligned by one token would route tokens
    through other experts and leave it)."""
    import torch as _torch

    args = [a if a != "embedded://model/qwen3-tiny" else "embedded://model/qwen3-moe-tiny" for a in BASE_ARGS]
    run = trainer("--colocate", "--use-rollout-routing-replay", base=args)
    assert_finished(run)
    assert max(run.series("step", ABS_DIFF)) <= thresholds["fp32_floor_max_abs_diff"]
    for rollout_id in (0, 1):
        rollout = _torch.load(run.out_dir / "dumps" / f"rollout_{rollout_id}.pt", weights_only=False)
        train = _torch.load(run.out_dir / "dumps" / f"train_{rollout_id}_0.pt", weights_only=False)
        for sample, trained in zip(rollout["samples"], train["samples"]):
            routed = sample["rollout_routed_experts"]
            assert tuple(routed.shape) == (len(sample["tokens"]) - 1, 2, 2)
            assert _torch.equal(trained["trainer_routed_experts"], _torch.sort(routed.long(), dim=-1).values)


def test_routing_replay_on_the_dense_model_is_one_line(tmp_path):
    line = refused_in_one_line(tmp_path, "--colocate", "--use-rollout-routing-replay")
    assert "--use-rollout-routing-replay" in line and "dense model" in line
