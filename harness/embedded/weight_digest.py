"""Probe 2's evidence: a digest of the weights each engine actually holds, in one layout.

vLLM side: ``embedded_weight_digest``, a method every vLLM worker gets through vLLM's own
``worker_extension_cls`` (harness/embedded/worker_extension.py), so ``collective_rpc`` reaches it
wherever the worker runs: in the trainer's process, in the engine-core
child of a TP=2 trainer, in the non-colocate server. It reads back every parameter of the engine's
model: name, dtype, shape and a SHA-256 of its values. Trainer side: the HF state
dict gathered from the Megatron model, put through what the sync does to it (the fp8 rounding of
an fp8 rollout), laid out as vLLM stacks it (q/k/v into ``qkv_proj``, gate/up into
``gate_up_proj``) and cast to the dtype the engine reported for that tensor, as vLLM's loader casts.

Both sides hash the same tensors: those with one name and shape on both. A tensor vLLM keeps in
its own packed layout (the CPU fused-MoE experts) is listed as not comparable, never hashed on one
side only. Equal digests mean the engine holds exactly what the trainer computes with.

vLLM's CPU linear layers may pack their weight for oneDNN (or the SGL kernel) at load time and drop
``layer.weight`` (shape (0,)); whether they do depends on the CPU's ISA (with oneDNN limited to
AVX2 they keep it). So the digest would cover the linear weights on one machine and not on another.
The engine therefore hashes each linear weight as it goes into the packing (a layout change, no
rounding), on every load, and reports that digest under the weight's name.
"""

from __future__ import annotations

import hashlib

import torch

WORKER_METHOD = "embedded_weight_digest"  # worker_extension.EmbeddedWorkerExtension's
PACKED_DIGEST = "_embedded_packed_weight_digest"  # set on a vLLM linear layer whose weight was packed
# vLLM's stacked parameters (Qwen3's stacked_params_mapping): fused name -> HF parts in order.
STACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def tensor_sha(t: torch.Tensor) -> str:
    """SHA-256 of the values (as fp32: exact for bf16/fp16/fp32) and the shape."""
    data = t.detach().to(torch.float32).contiguous().cpu()
    digest = hashlib.sha256(str(tuple(data.shape)).encode())
    digest.update(data.numpy().tobytes())
    return digest.hexdigest()[:16]


def _describe(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "sha": tensor_sha(t)}


def engine_report(named_parameters) -> dict:
    """{name: {dtype, shape, sha}} of a model's parameters (runs inside the engine process)."""
    return {name: _describe(p) for name, p in named_parameters}


def model_report(model) -> dict:
    """engine_report of a vLLM model, a packed linear weight reported by the digest taken as it was packed."""
    report = engine_report(model.named_parameters())
    for name, module in model.named_modules():
        packed = getattr(module, PACKED_DIGEST, None)
        weight = f"{name}.weight" if name else "weight"
        if packed is not None and weight in report and report[weight]["shape"] == [0]:
            report[weight] = packed
    return report


def install_packing_digest() -> None:
    """Wrap vLLM's CPU linear dispatch (idempotent): hash a 2-D weight before it is packed and dropped."""
    from vllm.model_executor.layers import utils

    if getattr(utils.dispatch_cpu_unquantized_gemm, "_embedded_digest", False):
        return
    original = utils.dispatch_cpu_unquantized_gemm

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        weight = layer.weight
        before = None if weight.is_meta or weight.ndim != 2 else _describe(weight)
        original(layer, remove_weight)
        # kept only while the weight is packed and gone: a stale digest must never stand in
        setattr(layer, PACKED_DIGEST, before if before is not None and layer.weight.numel() == 0 else None)

    dispatch_cpu_unquantized_gemm._embedded_digest = True
    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def in_engine_layout(hf_state: dict) -> dict:
    """The HF state dict with vLLM's stacked parameters concatenated as its loader does."""
    out, consumed = {}, set()
    for name in hf_state:
        if ".experts." in name:
            continue
        for fused, parts in STACKED.items():
            for part in parts:
                if f".{part}." not in name:
                    continue
                target = name.replace(f".{part}.", f".{fused}.")
                if target not in out:
                    out[target] = torch.cat([hf_state[name.replace(f".{part}.", f".{p}.")] for p in parts], 0)
                consumed.add(name)
    out.update({n: t for n, t in hf_state.items() if n not in consumed})
    return out


def _combined(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def compare(engine: dict, sent_state: dict) -> dict:
    """Both sides' digests over the tensors they hold in one layout, and what could not be compared."""
    layout = in_engine_layout(sent_state)
    common = sorted(n for n in engine if n in layout and list(layout[n].shape) == engine[n]["shape"])
    trainer = [tensor_sha(layout[n].to(getattr(torch, engine[n]["dtype"]))) for n in common]
    differing = [n for n, sha in zip(common, trainer) if sha != engine[n]["sha"]]
    return {
        "engine_sha": _combined([f"{n}:{engine[n]['sha']}" for n in common]),
        "trainer_sha": _combined([f"{n}:{sha}" for n, sha in zip(common, trainer)]),
        "tensors": len(common),
        "differing": differing,
        "not_comparable": sorted((set(engine) | set(layout)) - set(common)),
    }
