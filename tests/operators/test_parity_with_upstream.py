"""The transcriptions used where Megatron-Core / vLLM are absent (the H200 image) equal upstream."""

from __future__ import annotations

import pytest
import torch

from harness.operators import impl_megatron, sampling_filters

pytestmark = pytest.mark.operator


def test_megatron_transcription_equals_megatron_core_bitwise(small_bundle_cpu):
    upstream = pytest.importorskip("megatron.core.tensor_parallel.cross_entropy").VocabParallelCrossEntropy
    b = small_bundle_cpu
    shard = b.weight[1000:2000]
    logits = impl_megatron.shard_logits(b.hidden, shard, 0.9)
    results = []
    for ce in (upstream, impl_megatron._TranscribedVocabParallelCE):
        lg, mx = ce.calculate_logits_max(logits.clone())
        _, _, predicted, sum_exp, _ = ce.calculate_predicted_logits(lg, b.targets, mx, 1000, 2000)
        results.append((mx, predicted, sum_exp))
    for a, c in zip(*results):
        assert torch.equal(a, c)


@pytest.mark.parametrize("top_k,top_p", [(40, None), (None, 0.95), (40, 0.95)])
def test_vllm_filter_transcription_equals_vllm_bitwise(top_k, top_p):
    mod = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler")
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(16, 1000, generator=gen) * 3
    k = None if top_k is None else torch.full((16,), top_k)
    p = None if top_p is None else torch.full((16,), top_p)
    expected = mod.apply_top_k_top_p_pytorch(logits.clone(), k, p, allow_cpu_sync=False)
    got = sampling_filters.apply_top_k_top_p_transcribed(logits.clone(), k, p)
    assert torch.equal(torch.isinf(expected), torch.isinf(got))
    assert torch.equal(expected, got)
