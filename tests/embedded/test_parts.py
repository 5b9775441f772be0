"""The trainer's parts against real references: HF Qwen3, vLLM's own sampler masks, math-verify."""

from __future__ import annotations

import pytest
import torch

from harness.embedded import fp8
from harness.embedded.logprobs import processed_mask
from harness.embedded.megatron_model import hf_to_megatron, megatron_to_hf
from harness.embedded.policy import micro_batches
from harness.embedded.reward import deepscaler


@pytest.fixture(scope="module")
def checkpoint():
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from harness.embedded.factory import ensure_model

    path = ensure_model("qwen3-tiny")
    return path, AutoConfig.from_pretrained(path), load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("tp", [1, 2])
def test_hf_megatron_round_trip_is_exact(checkpoint, tp):
    _, config, hf_state = checkpoint
    shards = [hf_to_megatron(hf_state, config, tp, rank) for rank in range(tp)]
    back = megatron_to_hf(shards, config)
    assert sorted(back) == sorted(hf_state)
    for name, tensor in hf_state.items():
        assert torch.equal(back[name], tensor), name


def test_megatron_gptmodel_matches_hf_logits(checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    from harness.embedded.megatron_cpu import causal_mask, init_distributed, init_model_parallel, on_cpu
    from harness.embedded.megatron_model import build_gpt, load_into

    path, config, hf_state = checkpoint
    init_distributed(0, 1, str(tmp_path / "store"))
    init_model_parallel(1, 0)
    model = build_gpt(config, bf16=False, tp=1)
    load_into(model, hf_to_megatron(hf_state, config, 1, 0))
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), on_cpu():
        ours = model(ids, torch.arange(24).expand(2, -1), causal_mask(24))
        ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)(ids).logits
    assert (ours - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("top_k, top_p", [(40, 1.0), (-1, 0.95), (40, 0.95), (5, 0.5), (-1, 1.0)])
def test_replayed_filter_set_is_vllms(top_k, top_p):
    """Our replay keeps exactly the tokens vLLM's own sampler keeps (its PyTorch top-k/top-p)."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    logits = torch.randn(64, 512, generator=torch.Generator().manual_seed(top_k + int(top_p * 100))) * 3
    k = torch.full((64,), top_k) if top_k > 0 else None
    p = torch.full((64,), top_p) if top_p < 1 else None
    reference = apply_top_k_top_p_pytorch(logits.clone(), k, p) if (k is not None or p is not None) else logits
    assert torch.equal(processed_mask(logits, top_k, top_p), reference > float("-inf"))


def test_fp8_blocks_bound_the_error_by_their_own_scale():
    w = torch.randn(300, 200, generator=torch.Generator().manual_seed(1))
    w[:128, :128] *= 100  # one loud block must not coarsen its neighbours
    q = fp8.quantize_weight_blockwise(w)
    assert not torch.equal(q, w)
    quiet = (q[128:, 128:] - w[128:, 128:]).abs().max()
    assert quiet <= w[128:, 128:].abs().max() * 2**-3  # e4m3: 3 mantissa bits
    assert quiet < (q[:128, :128] - w[:128, :128]).abs().max()
    x = torch.randn(7, 64)
    assert (fp8.quantize_activation_groups(x) - x).abs().max() <= x.abs().max() * 2**-3


def test_micro_batches_respect_the_token_budget():
    batches = micro_batches([10, 30, 30, 5, 40], 64)
    assert [i for b in batches for i in b] == [0, 1, 2, 3, 4]
    assert batches == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize(
    "response, label, reward",
    [
        ("<think>\n3+4=7\n</think>\n\n\\boxed{7}", "7", 1.0),
        ("<think>x</think> so \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("<think>x</think> \\boxed{8}", "7", 0.0),
        ("\\boxed{7}", "7", 0.0),  # no </think>: VIME's deepscaler gives 0
        ("<think>x</think> \\boxed{7", "7", 0.0),  # truncated answer
    ],
)
def test_deepscaler_reward(response, label, reward):
    assert deepscaler(response, label) == reward
