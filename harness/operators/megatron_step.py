"""A Megatron-Core GPT training step with its log-prob path swapped: native, fused, Cut Cross-Entropy.

    record = megatron_step_record("cuda", layers=2, hidden=2048, vocab=151936, batch=2, seq=2048)

One process, TP=1 (a one-rank group: NCCL on a GPU, gloo on CPU). The model is megatron-core's own
``GPTModel`` with the local layer spec (no Transformer Engine, no Apex), RMSNorm, rope, SwiGLU, bf16,
untied output layer. The native path is the model's own (``output_layer`` materialises [S, B, V] bf16
logits, ``vocab_parallel_cross_entropy`` takes the per-token loss); the other paths replace the output
layer's forward so the model returns its final hidden states, and take the per-token loss from an
operator of the registry on (hidden, output_layer.weight, labels); ``fp32-logits`` is the reference for the
gradients (fp32 logits from the bf16 operands). Each path: step time (forward + backward of the mean loss,
median of ``reps`` steps, the paths interleaved step by step), peak memory above the model and its inputs,
the loss against an fp64 log-softmax of the same hidden states, and every parameter's gradient against
the reference's and the native path's (relative L2 per tensor; max and median over tensors). Batch invariance: the LM head's gradient of
sample 0's rows alone vs inside the micro-batch, on the same hidden states (the decoder's own GEMMs
are cuBLAS's and not batch invariant; ``decoder_batch_invariant`` says whether its hidden states were).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

# path -> registry operator; None: the model's own output layer and loss; FP32_LOGITS: the reference for the
# gradients, logits in fp32 from the bf16 operands (error ~2e-6 in a log-prob against fp64) then log_softmax.
FP32_LOGITS = "fp32 logits"
PATHS = {
    "native": None,
    "fp32-logits": FP32_LOGITS,
    "fused": "fused-linear-logprob",
    "fused-lean": "fused-linear-logprob-lean",
    "cut-cross-entropy": "cut-cross-entropy",
}
REFERENCE = "fp32-logits"


def _init(device: torch.device) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(0)
    if device.type == "cuda":
        model_parallel_cuda_manual_seed(0)


def position_embedding(device: torch.device) -> str:
    # megatron-core's rope moves its frequencies to torch.cuda.current_device(): on CPU (tests) learned positions
    return "rope" if device.type == "cuda" else "learned_absolute"


def build_model(device, layers, hidden, vocab, seq, heads=16, ffn=None):
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    config = TransformerConfig(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=ffn or 3 * hidden,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_cpu_initialization=device.type != "cuda",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = GPTModel(
        config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=vocab,
        max_sequence_length=seq,
        position_embedding_type=position_embedding(device),
        share_embeddings_and_output_weights=False,
    )
    return Float16Module(config, model.to(device))  # as Megatron trains: bf16 weights, inputs cast on the first stage


class _HiddenOut:
    """Replaces output_layer.forward: the model then returns its final hidden states [B, S, H]."""

    def __call__(self, hidden_states, weight=None, runtime_gather_output=None):
        return hidden_states, None


def _loss(model, path, ids, pos, mask, labels, temperature=1.0):
    """(per-token loss [B, S] fp32, the hidden states fed to the LM head or None for native)."""
    if PATHS[path] is None:
        model.module.output_layer.__dict__.pop("forward", None)
        return model(ids, pos, mask, labels=labels).float(), None
    from harness.operators import registry

    model.module.output_layer.forward = _HiddenOut()
    hidden = model(ids, pos, mask, fp32_output=False)  # [B, S, H], bf16
    b, s, h = hidden.shape
    flat = hidden.reshape(b * s, h)
    weight = model.module.output_layer.weight
    if PATHS[path] == FP32_LOGITS:
        logp = torch.log_softmax((flat.float() @ weight.float().T) / temperature, -1).gather(1, labels.reshape(-1, 1)).squeeze(1)
    else:
        logp = registry.get(PATHS[path]).selected_logprobs(flat, weight, labels.reshape(-1), temperature)
    return (-logp).view(b, s), hidden


def _fp64_loss(hidden, weight, labels, row_chunk=1024):
    flat, lab, out = hidden.reshape(-1, hidden.shape[-1]).detach(), labels.reshape(-1), []
    w64 = weight.detach().double()
    for a in range(0, flat.shape[0], row_chunk):
        logp = torch.log_softmax(flat[a : a + row_chunk].double() @ w64.T, -1)
        out.append(-logp.gather(1, lab[a : a + row_chunk, None]).squeeze(1))
    return torch.cat(out).view(labels.shape)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _step(model, path, batch, device):
    model.zero_grad(set_to_none=True)
    loss, hidden = _loss(model, path, *batch)
    loss.mean().backward()
    return loss.detach()


def _grads(model) -> dict:
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}


def _lm_head_row_grads(op_name, hidden, weight, labels):
    """grad w.r.t. the LM head's hidden input, sum of per-token losses (no 1/N that differs with the batch)."""
    from harness.operators import registry

    h = hidden.detach().reshape(-1, hidden.shape[-1]).clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()
    if op_name is None:  # the native computation: bf16 logits, fp32 log-softmax
        logp = torch.log_softmax((h @ w.T).float(), -1).gather(1, labels.reshape(-1, 1)).squeeze(1)
    elif op_name == FP32_LOGITS:
        logp = torch.log_softmax(h.float() @ w.float().T, -1).gather(1, labels.reshape(-1, 1)).squeeze(1)
    else:
        logp = registry.get(op_name).selected_logprobs(h, w, labels.reshape(-1))
    (-logp).sum().backward()
    return h.grad


def megatron_step_record(
    device="cuda", layers=2, hidden=2048, vocab=151936, batch=2, seq=2048, reps=10, warmup=3, paths=None, on_progress=print
) -> dict:
    from harness.operators import registry

    device = torch.device(device)
    _init(device)
    model = build_model(device, layers, hidden, vocab, seq)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
    labels = torch.roll(ids, -1, dims=1)
    pos = torch.arange(seq, device=device)[None].expand(batch, seq)
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), 1)[None, None]
    data = (ids, pos, mask, labels)
    paths = list(paths or PATHS)
    rows = {}
    for path in paths:
        op = PATHS[path]
        ok, why = (True, "") if op in (None, FP32_LOGITS) else registry.get(op).available()
        rows[path] = {"path": path, "operator": op, "available": ok} | ({} if ok else {"why_unavailable": why})
    live = [p for p in paths if rows[p]["available"]]
    for p in live:  # compile, warm
        for _ in range(warmup):
            _step(model, p, data, device)
    _sync(device)
    samples = {p: [] for p in live}
    for _ in range(reps):  # interleaved: the card's clock drifts with load
        for p in live:
            _sync(device)
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _step(model, p, data, device)
                end.record()
                _sync(device)
                samples[p].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                _step(model, p, data, device)
                samples[p].append((time.perf_counter() - t0) * 1e3)
    grads, hidden_states = {}, None
    for p in live:
        _sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        model.zero_grad(set_to_none=True)
        loss, h = _loss(model, p, *data)
        loss.mean().backward()
        _sync(device)
        row = rows[p]
        row["step_ms_median"] = statistics.median(samples[p])
        row["step_ms_all"] = samples[p]
        row["peak_extra_bytes"] = int(torch.cuda.max_memory_allocated() - base) if device.type == "cuda" else None
        row["loss_mean"] = float(loss.detach().mean())
        grads[p] = _grads(model)
        if h is not None and hidden_states is None:
            hidden_states = h.detach()
        rows[p]["_loss"] = loss
        on_progress(f"megatron step {p}: {row['step_ms_median']:.1f} ms, loss {row['loss_mean']:.6f}")
    if hidden_states is not None:  # every path's loss against fp64 on the same hidden states (the non-native paths' input)
        ref = _fp64_loss(hidden_states, model.module.output_layer.weight, labels)
        for p in live:
            err = (rows[p].pop("_loss").double() - ref).abs()
            rows[p] |= {"loss_max_abs_err_vs_fp64": float(err.max()), "loss_mean_abs_err_vs_fp64": float(err.mean())}
    for p in live:
        rows[p].pop("_loss", None)
        for base in ("native", REFERENCE):
            if p != base and base in grads:
                per = {n: float((grads[p][n] - g).norm() / g.norm().clamp(min=1e-30)) for n, g in grads[base].items()}
                rows[p][f"grad_rel_diff_vs_{base}_max"] = max(per.values())
                rows[p][f"grad_rel_diff_vs_{base}_median"] = statistics.median(per.values())
                rows[p][f"grad_rel_diff_vs_{base}"] = per
    out = {
        "model": {
            "layers": layers,
            "hidden": hidden,
            "vocab": vocab,
            "heads": 16,
            "ffn": 3 * hidden,
            "batch": batch,
            "seq": seq,
            "positions": position_embedding(device),
        }
    }
    if hidden_states is not None:  # batch invariance of the LM head's gradient, sample 0 alone vs in the micro-batch
        inv = {}
        for p in live:
            full = _lm_head_row_grads(PATHS[p], hidden_states, model.module.output_layer.weight, labels)
            alone = _lm_head_row_grads(PATHS[p], hidden_states[:1], model.module.output_layer.weight, labels[:1])
            inv[p] = {"rows": seq, "rows_differing": int((alone != full[:seq]).any(dim=1).sum())}
        out["lm_head_grad_batch_invariance"] = inv
        model.module.output_layer.forward = _HiddenOut()
        with torch.no_grad():
            alone_h = model(ids[:1], pos[:1], mask, fp32_output=False)
        out["decoder_batch_invariant"] = bool(torch.equal(alone_h[0], hidden_states[0]))
        model.module.output_layer.__dict__.pop("forward", None)
    return out | {"paths": list(rows.values())}
