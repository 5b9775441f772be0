"""Issue 9 on CPU: two real gloo processes, one vocab shard each.

The fused operator's all-gather of chunk partials must reproduce the single-process TP=1 result
bitwise on every rank; Megatron-native's all-reduced sums are recorded (they differ from TP=1).
"""

from __future__ import annotations

import json

import pytest

from harness.operators import vocab_parallel_run

pytestmark = pytest.mark.operator


def test_fused_over_gloo_tp2_equals_tp1_bitwise(tmp_path):
    out = tmp_path / "tp2.json"
    vocab_parallel_run.main(["--spawn", "2", "--shape", "96,128,2000", "--reps", "1", "--out", str(out)])
    record = json.loads(out.read_text())
    rows = {r["name"]: r for r in record["results"]}
    fused, megatron = rows["fused-linear-logprob"], rows["megatron-native"]
    assert record["backend"] == "gloo" and record["tp"] == 2
    assert fused["bitwise_equal_tp1"] and fused["ranks_agree"], fused
    assert megatron["ranks_agree"], megatron
