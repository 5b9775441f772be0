"""The bench CLI writes the record the issue asks for, and refuses bad input in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.operator

CLI = Path(__file__).resolve().parents[2] / "tools" / "bench_operators.py"
REQUIRED = (
    "name",
    "mean_abs_err",
    "p99_abs_err",
    "max_abs_err",
    "batch_invariant",
    "tp_invariant",
    "ms_median",
    "gemm_ms_median",
    "peak_extra_bytes",
    "shape",
)


def _cli():
    spec = importlib.util.spec_from_file_location("bench_operators_cli", CLI)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_writes_a_complete_record(tmp_path, capsys):
    out, md = tmp_path / "cpu.json", tmp_path / "cpu.md"
    rc = _cli().main(
        [
            "--device",
            "cpu",
            "--shape",
            "64,128,1024",
            "--names",
            "fused-linear-logprob,vllm-native",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--markdown",
            str(md),
        ]
    )
    assert rc == 0
    record = json.loads(out.read_text())
    assert "gpu" in record["hardware"] and record["libraries"]["torch"]
    assert [r["name"] for r in record["results"]] == ["fused-linear-logprob", "vllm-native"]
    for row in record["results"]:
        assert all(k in row for k in REQUIRED), sorted(set(REQUIRED) - set(row))
    assert record["results"][0]["batch_invariant"] is True and record["results"][0]["tp_invariant"] is True
    assert "| fused-linear-logprob" in md.read_text()


def test_bad_shape_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        _cli().main(["--shape", "8x8", "--out", "/dev/null"])
    assert info.value.code == 2
    assert "expected 'production', 'small' or T,H,V" in capsys.readouterr().err


def test_missing_bundle_file_is_one_line(tmp_path, capsys):
    rc = _cli().main(["--bundle", str(tmp_path / "nope.safetensors"), "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "no such bundle file" in err and "Traceback" not in err


def test_bundle_with_a_missing_key_names_it(tmp_path, capsys):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "probe.safetensors"
    save_file({"hidden": torch.zeros(2, 8), "weight": torch.zeros(16, 8)}, str(path))
    rc = _cli().main(["--bundle", str(path), "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "missing key 'targets'" in capsys.readouterr().err
