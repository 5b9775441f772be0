"""A numerical control the run cannot apply is refused with one line, not run as a silent no-op."""

from __future__ import annotations

from conftest import refused_in_one_line


def test_a_wrong_fp8_scale_without_fp8_weights_is_one_clear_error(tmp_path):
    # BASE_ARGS declare no --vllm-quantization: the rollout holds no fp8 weight block to scale.
    line = refused_in_one_line(tmp_path, "--colocate", "--embedded-inject", "rollout-fp8-weight-scale:2")
    assert "rollout-fp8-weight-scale" in line and "--vllm-quantization fp8" in line, line


def test_fp8_weight_bits_without_fp8_weights_is_one_clear_error(tmp_path):
    line = refused_in_one_line(tmp_path, "--colocate", "--embedded-inject", "rollout-fp8-weight-bits:1")
    assert "rollout-fp8-weight-bits" in line and "--vllm-quantization fp8" in line, line
