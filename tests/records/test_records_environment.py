"""The environment record: commit, image, hardware, versions, env vars with secrets redacted."""

import json
import subprocess
import sys

import pytest

from harness.records.environment import REDACTED, collect_environment, container_image, redact_env


def test_secret_keys_and_token_values_are_redacted_and_the_rest_kept():
    env = redact_env(
        {
            "NCCL_DEBUG": "INFO",
            "NCCL_IB_HCA": "mlx5_0,mlx5_1",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3",
            "VLLM_API_KEY": "short",
            "TORCH_HUB_TOKEN": "abc",
            "VLLM_SOME_SETTING": "hf_abcdefghijklmnopqrstuvwxyz0123",
            "NVTE_OPAQUE": "Zx9kQ2mP7vL4nR8tW1yB6cF3hJ5sD0gA",
            "CUDA_HOME": "/usr/local/cuda-12.8/targets/x86_64-linux/Lib64Extra",
            "VLLM_REMOTE": "https://alice:s3cret@models.example.com/v1",
            "TORCH_CUDA_ARCH_LIST": "9.0;10.0",
            "HOME": "/root",
            "HF_TOKEN": "hf_notrelevantprefix",
        }
    )
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and env["TORCH_CUDA_ARCH_LIST"] == "9.0;10.0"
    assert env["CUDA_HOME"].startswith("/usr/local/cuda")
    for key in ("VLLM_API_KEY", "TORCH_HUB_TOKEN", "VLLM_SOME_SETTING", "NVTE_OPAQUE"):
        assert env[key] == REDACTED, key
    assert env["VLLM_REMOTE"] == f"https://{REDACTED}@models.example.com/v1"
    assert "HOME" not in env and "HF_TOKEN" not in env  # not a relevant prefix: not recorded at all


def test_vime_commit_comes_from_git(tmp_path):
    root = tmp_path / "vime"
    root.mkdir()
    (root / "train.py").write_text("print('train')\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "train.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    record = collect_environment(root, "nvcr.io/nvidia/pytorch:25.10-py3")
    assert record["vime"]["commit"] == head and record["vime"]["dirty"] is False
    assert record["container"] == {"image": "nvcr.io/nvidia/pytorch:25.10-py3", "source": "option"}


def test_a_root_that_is_not_a_checkout_says_so(tmp_path):
    record = collect_environment(tmp_path, None)
    assert record["vime"]["commit"] is None and "not a git checkout" in record["vime"]["note"]


def test_image_from_the_environment():
    assert container_image(None, {"CONTAINER_IMAGE": "vime:2026.11"}) == {"image": "vime:2026.11", "source": "env CONTAINER_IMAGE"}


def test_hardware_and_versions_without_importing_heavy_packages():
    # In a fresh interpreter: the record must not pay for (or depend on) importing torch/vllm/ray.
    code = (
        "import json, sys; from harness.records.environment import collect_environment; "
        "r = collect_environment(None, None); "
        "print(json.dumps({'r': r, 'heavy': [m for m in ('torch', 'vllm', 'ray', 'megatron') if m in sys.modules]}))"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    record = out["r"]
    assert out["heavy"] == []
    cpu = record["hardware"]["cpu"]
    assert cpu["cores"] >= 1 and cpu["memory_gib"] > 0 and cpu["model"]
    assert "count" in record["hardware"]["gpus"] and record["hardware"]["nodes"]["count"] >= 1
    from importlib.metadata import version

    assert record["versions"]["torch"]["version"] == version("torch")
    assert record["versions"]["megatron-core"]["version"] == version("megatron-core")
    assert record["versions"]["ray"]["version"] == version("ray")


@pytest.mark.parametrize("key", ["SLURM_JOB_NUM_NODES", "NNODES"])
def test_node_count_from_scheduler_variables(monkeypatch, key):
    monkeypatch.setenv(key, "4")
    assert collect_environment(None, None)["hardware"]["nodes"]["count"] == 4


def test_the_cpu_kind_and_the_isa_switches_are_named():
    from harness.records.environment import cpu_isa, isa_text

    # The flag lines of the two x86 kinds of ../shared/facts/machines.md (abridged).
    xeon = "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_tile amx_bf16\n"
    epyc = "flags\t\t: fpu sse2 avx avx2 fma\n"
    assert cpu_isa(xeon, {})["isa"] == "AVX-512 + AMX"
    assert cpu_isa(epyc, {})["isa"] == "AVX2 only"
    assert cpu_isa("", {})["isa"] is None
    emulated = cpu_isa(xeon, {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell", "HOME": "/root"})
    assert emulated["isa_settings"] == {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
    assert isa_text(emulated) == "AVX-512 + AMX, under ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell"
