"""Probe 2's digest: the trainer's state laid out and cast as vLLM holds it hashes equal to the
engine's read-back exactly when the values are equal (no embedded run)."""

from __future__ import annotations

import torch

from harness.embedded import weight_digest


def _hf_state(seed=0):
    gen = torch.Generator().manual_seed(seed)
    p = "model.layers.0."
    shapes = {
        "model.embed_tokens.weight": (32, 8),
        p + "self_attn.q_proj.weight": (8, 8),
        p + "self_attn.k_proj.weight": (4, 8),
        p + "self_attn.v_proj.weight": (4, 8),
        p + "mlp.gate_proj.weight": (12, 8),
        p + "mlp.up_proj.weight": (12, 8),
        p + "mlp.down_proj.weight": (8, 12),
        "lm_head.weight": (32, 8),
    }
    return {name: torch.randn(shape, generator=gen) for name, shape in shapes.items()}


def _engine(hf_state, dtype=torch.bfloat16):
    """A model as vLLM's loader leaves it: stacked q/k/v and gate/up, cast to the engine dtype."""
    return weight_digest.engine_report((n, t.to(dtype)) for n, t in weight_digest.in_engine_layout(hf_state).items())


def test_layout_stacks_what_vllm_stacks():
    layout = weight_digest.in_engine_layout(_hf_state())
    assert layout["model.layers.0.self_attn.qkv_proj.weight"].shape == (16, 8)
    assert layout["model.layers.0.mlp.gate_up_proj.weight"].shape == (24, 8)
    assert not any(part in name for name in layout for part in (".q_proj.", ".gate_proj."))


def test_same_values_hash_equal_after_the_engines_cast():
    state = _hf_state()
    result = weight_digest.compare(_engine(state), state)  # trainer fp32, engine bf16: cast as vLLM casts
    assert result["engine_sha"] == result["trainer_sha"] and not result["differing"]
    assert result["tensors"] == 5 and not result["not_comparable"]  # embed, qkv, gate_up, down, lm_head


def test_one_changed_value_names_its_tensor():
    state = _hf_state()
    engine = _engine(state)
    state["model.layers.0.mlp.up_proj.weight"][3, 1] += 0.5
    result = weight_digest.compare(engine, state)
    assert result["engine_sha"] != result["trainer_sha"]
    assert result["differing"] == ["model.layers.0.mlp.gate_up_proj.weight"]


def test_tensors_in_another_layout_are_listed_not_hashed():
    state = _hf_state()
    engine = _engine(state)
    engine["model.layers.0.mlp.experts.w13_weight"] = {"dtype": "bfloat16", "shape": [2, 24, 8], "sha": "packed"}
    state["model.layers.0.mlp.experts.0.gate_proj.weight"] = torch.zeros(12, 8)
    result = weight_digest.compare(engine, state)
    assert result["engine_sha"] == result["trainer_sha"]
    assert "model.layers.0.mlp.experts.w13_weight" in result["not_comparable"]
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" in result["not_comparable"]


def test_a_linear_weight_vllm_packs_away_is_reported_as_it_was_packed():
    """vLLM's CPU linear dispatch may pack the weight and drop it (oneDNN with AVX-512) or keep it
    (AVX2); either way the engine's report gives the weight's own digest, and a reload's new one."""
    from vllm.model_executor.layers import utils

    weight_digest.install_packing_digest()
    model = torch.nn.Module()
    model.o_proj = torch.nn.Module()
    weights = [torch.randn(64, 128, generator=torch.Generator().manual_seed(s)).to(torch.bfloat16) for s in (1, 2)]
    for weight in weights:  # the first load, then a reload with other values
        model.o_proj.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
        utils.dispatch_cpu_unquantized_gemm(model.o_proj, remove_weight=True)
        report = weight_digest.model_report(model)
        assert report["o_proj.weight"] == {"dtype": "bfloat16", "shape": [64, 128], "sha": weight_digest.tensor_sha(weight)}


def test_the_worker_extension_is_what_vllm_mixes_into_every_worker():
    """vLLM resolves worker_extension_cls by name in whichever process builds the worker (the
    trainer's, a TP=2 engine-core child, the server's) and refuses a method the worker already has."""
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.worker.cpu_worker import CPUWorker
    from vllm.v1.worker.gpu_worker import Worker

    from harness.embedded.engine import WORKER_EXTENSION

    extension = resolve_obj_by_qualname(WORKER_EXTENSION)
    methods = [name for name in dir(extension) if not name.startswith("__")]
    assert weight_digest.WORKER_METHOD in methods and {"embedded_capture_start", "embedded_capture_take"} <= set(methods)
    from harness.embedded import operator_calls

    assert operator_calls.WORKER_METHOD in methods  # the engine side's operator counts, read where the sampler ran
    assert not any(name in vars(cls) for name in methods for cls in (Worker, CPUWorker))  # no patch on vLLM's classes
