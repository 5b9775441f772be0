"""Issues 9 and 16 on CPU: real gloo process groups, one vocab shard per process.

The fused operator's all-gather of chunk partials must reproduce the single-process TP=1 result
bitwise on every rank; the Megatron drop-in (fused_vocab_parallel_logprobs, autograd over the
group) must reproduce TP=1's log-probs, grad_hidden and each rank's grad_weight rows bitwise.
Megatron-native's all-reduced sums are recorded (they differ from TP=1).
"""

from __future__ import annotations

import json

import pytest

from harness.operators import vocab_parallel_run

pytestmark = pytest.mark.operator


@pytest.mark.parametrize("tp", [2, 4])
def test_fused_over_gloo_equals_tp1_bitwise_forward_and_gradients(tmp_path, tp):
    out = tmp_path / f"tp{tp}.json"
    vocab_parallel_run.main(["--spawn", str(tp), "--shape", "96,128,2000", "--reps", "1", "--out", str(out)])
    record = json.loads(out.read_text())
    rows = {r["name"]: r for r in record["results"]}
    fused, megatron = rows["fused-linear-logprob"], rows["megatron-native"]
    assert record["backend"] == "gloo" and record["tp"] == tp
    assert fused["bitwise_equal_tp1"] and fused["ranks_agree"], fused
    assert megatron["ranks_agree"], megatron
    grads = record["gradients"]
    assert grads["logp_bitwise_equal_tp1"], grads
    assert grads["grad_hidden_bitwise_equal_tp1"], grads
    assert grads["grad_weight_shards_bitwise_equal_tp1"], grads
