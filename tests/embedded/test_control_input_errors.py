"""A numerical control the run cannot apply is refused with one line, not run as a silent no-op."""

from __future__ import annotations

import subprocess
import sys

from conftest import BASE_ARGS, REPO


def test_a_wrong_fp8_scale_without_fp8_weights_is_one_clear_error(tmp_path):
    # BASE_ARGS declare no --vllm-quantization: the rollout holds bf16/fp32 weights, no fp8 block scale.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.embedded.train",
            *BASE_ARGS,
            "--colocate",
            "--embedded-inject",
            "rollout-fp8-weight-scale:2",
            "--embedded-output-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert "rollout-fp8-weight-scale" in lines[0] and "--vllm-quantization fp8" in lines[0], lines[0]
