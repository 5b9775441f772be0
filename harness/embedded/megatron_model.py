"""Megatron-Core GPTModel built from a Qwen3 HF config, and exact HF <-> Megatron weight maps.

Layout facts (Megatron's, for a tensor-parallel rank ``r`` of ``tp``):
- ``linear_qkv``: per query group ``[q heads of the group; k; v]`` rows, groups split over TP;
- ``linear_fc1``: ``[gate; up]`` of the rank's slice; ``linear_fc2`` / ``linear_proj``: input-dim
  slices; the word embedding (tied LM head) is split by vocabulary rows;
- q/k layernorm and RMSNorm weights are replicated (the local spec names them
  ``input_layernorm`` / ``pre_mlp_layernorm``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.embedded.megatron_cpu import moe_without_te, on_cpu


def num_experts(hf) -> int:
    """Routed experts per MoE layer in an HF config; 0 for a dense model."""
    return getattr(hf, "num_experts", 0) or 0


def transformer_config(hf, *, bf16: bool, tp: int):
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=hf.num_hidden_layers,
        hidden_size=hf.hidden_size,
        num_attention_heads=hf.num_attention_heads,
        num_query_groups=hf.num_key_value_heads,
        kv_channels=hf.head_dim,
        ffn_hidden_size=hf.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        tensor_model_parallel_size=tp,
        use_cpu_initialization=True,
        perform_initialization=False,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        gradient_accumulation_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        **moe_fields(hf),
    )


def moe_fields(hf) -> dict:
    """Qwen3-MoE routing in Megatron's terms: softmax over the top-k logits equals Qwen3's softmax
    over all experts then top-k renormalised (norm_topk_prob); no aux loss in the miniature."""
    experts = num_experts(hf)
    if not experts:
        return {}
    return dict(
        num_moe_experts=experts,
        moe_router_topk=hf.num_experts_per_tok,
        moe_ffn_hidden_size=hf.moe_intermediate_size,
        moe_router_pre_softmax=False,
        moe_router_score_function="softmax",
        moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0,
        moe_grouped_gemm=False,
        moe_token_dispatcher_type="allgather",
        moe_router_dtype="fp32",
        # Megatron-Core's router replay hooks (R3, harness.embedded.routing): without a replay
        # action the routers compute their own top-k exactly as without them.
        moe_enable_routing_replay=True,
    )


def build_gpt(hf, *, bf16: bool, tp: int, true_on_policy: bool = False):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = transformer_config(hf, bf16=bf16, tp=tp)
    moe_without_te()
    spec = get_gpt_layer_local_spec(num_experts=num_experts(hf) or None, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm")
    if true_on_policy:  # the same spec with the engine-formula norms and the engine's attention kernel
        from harness.embedded.true_on_policy.layer_spec import block_spec

        spec = block_spec(num_experts(hf) or None, hf.num_hidden_layers)
    with on_cpu():
        model = GPTModel(
            config=config,
            transformer_layer_spec=spec,
            vocab_size=hf.vocab_size,
            max_sequence_length=hf.max_position_embeddings,
            share_embeddings_and_output_weights=hf.tie_word_embeddings,
            position_embedding_type="rope",
            rotary_base=int(hf.rope_parameters["rope_theta"]),
            parallel_output=True,
        )
    return model


def _split(t: torch.Tensor, dim: int, tp: int, rank: int) -> torch.Tensor:
    return torch.chunk(t, tp, dim=dim)[rank].clone()


def hf_to_megatron(hf_sd: dict, hf, tp: int, rank: int) -> dict:
    """The rank's Megatron state dict from a full HF state dict."""
    heads, groups, dim = hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim
    per_group = heads // groups
    out = {
        "embedding.word_embeddings.weight": _split(hf_sd["model.embed_tokens.weight"], 0, tp, rank),
        "decoder.final_layernorm.weight": hf_sd["model.norm.weight"].clone(),
    }
    if not hf.tie_word_embeddings:
        out["output_layer.weight"] = _split(hf_sd["lm_head.weight"], 0, tp, rank)
    for i in range(hf.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q = hf_sd[p + "self_attn.q_proj.weight"].view(groups, per_group * dim, -1)
        k = hf_sd[p + "self_attn.k_proj.weight"].view(groups, dim, -1)
        v = hf_sd[p + "self_attn.v_proj.weight"].view(groups, dim, -1)
        qkv = torch.cat([q, k, v], dim=1)  # [groups, (per_group+2)*dim, hidden]
        out[m + "self_attention.linear_qkv.weight"] = _split(qkv, 0, tp, rank).reshape(-1, qkv.shape[-1])
        out[m + "input_layernorm.weight"] = hf_sd[p + "input_layernorm.weight"].clone()
        out[m + "self_attention.q_layernorm.weight"] = hf_sd[p + "self_attn.q_norm.weight"].clone()
        out[m + "self_attention.k_layernorm.weight"] = hf_sd[p + "self_attn.k_norm.weight"].clone()
        out[m + "self_attention.linear_proj.weight"] = _split(hf_sd[p + "self_attn.o_proj.weight"], 1, tp, rank)
        out.update(_mlp_to_megatron(hf_sd, hf, p, m, tp, rank))
        out[m + "pre_mlp_layernorm.weight"] = hf_sd[p + "post_attention_layernorm.weight"].clone()
    return out


def _mlp_to_megatron(hf_sd: dict, hf, p: str, m: str, tp: int, rank: int) -> dict:
    experts = num_experts(hf)
    if not experts:
        gate = _split(hf_sd[p + "mlp.gate_proj.weight"], 0, tp, rank)
        up = _split(hf_sd[p + "mlp.up_proj.weight"], 0, tp, rank)
        return {
            m + "mlp.linear_fc1.weight": torch.cat([gate, up], dim=0),
            m + "mlp.linear_fc2.weight": _split(hf_sd[p + "mlp.down_proj.weight"], 1, tp, rank),
        }
    if tp != 1:
        raise ValueError("MoE layers need TP=1 here (MoE with TP needs sequence parallelism)")
    out = {m + "mlp.router.weight": hf_sd[p + "mlp.gate.weight"].clone()}
    for e in range(experts):
        hp, mp = f"{p}mlp.experts.{e}.", f"{m}mlp.experts.local_experts.{e}."
        out[mp + "linear_fc1.weight"] = torch.cat([hf_sd[hp + "gate_proj.weight"], hf_sd[hp + "up_proj.weight"]], 0)
        out[mp + "linear_fc2.weight"] = hf_sd[hp + "down_proj.weight"].clone()
    return out


def _mlp_to_hf(shards: list[dict], hf, p: str, m: str) -> dict:
    experts = num_experts(hf)
    if not experts:
        gates, ups = zip(*(torch.chunk(s[m + "mlp.linear_fc1.weight"], 2, dim=0) for s in shards))
        return {
            p + "mlp.gate_proj.weight": torch.cat(gates, 0),
            p + "mlp.up_proj.weight": torch.cat(ups, 0),
            p + "mlp.down_proj.weight": torch.cat([s[m + "mlp.linear_fc2.weight"] for s in shards], 1),
        }
    (only,) = shards
    out = {p + "mlp.gate.weight": only[m + "mlp.router.weight"].clone()}
    for e in range(experts):
        hp, mp = f"{p}mlp.experts.{e}.", f"{m}mlp.experts.local_experts.{e}."
        gate, up = torch.chunk(only[mp + "linear_fc1.weight"], 2, dim=0)
        out[hp + "gate_proj.weight"], out[hp + "up_proj.weight"] = gate.clone(), up.clone()
        out[hp + "down_proj.weight"] = only[mp + "linear_fc2.weight"].clone()
    return out


def megatron_to_hf(shards: list[dict], hf) -> dict:
    """The full HF state dict from every TP rank's Megatron state dict (rank order)."""
    heads, groups, dim = hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim
    per_group = heads // groups
    first = shards[0]
    cat = lambda key, d: torch.cat([s[key] for s in shards], dim=d)  # noqa: E731
    out = {
        "model.embed_tokens.weight": cat("embedding.word_embeddings.weight", 0),
        "model.norm.weight": first["decoder.final_layernorm.weight"].clone(),
    }
    if not hf.tie_word_embeddings:
        out["lm_head.weight"] = cat("output_layer.weight", 0)
    for i in range(hf.num_hidden_layers):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = cat(m + "self_attention.linear_qkv.weight", 0).view(groups, (per_group + 2) * dim, -1)
        q, k, v = torch.split(qkv, [per_group * dim, dim, dim], dim=1)
        out[p + "self_attn.q_proj.weight"] = q.reshape(heads * dim, -1).clone()
        out[p + "self_attn.k_proj.weight"] = k.reshape(groups * dim, -1).clone()
        out[p + "self_attn.v_proj.weight"] = v.reshape(groups * dim, -1).clone()
        out[p + "input_layernorm.weight"] = first[m + "input_layernorm.weight"].clone()
        out[p + "self_attn.q_norm.weight"] = first[m + "self_attention.q_layernorm.weight"].clone()
        out[p + "self_attn.k_norm.weight"] = first[m + "self_attention.k_layernorm.weight"].clone()
        out[p + "self_attn.o_proj.weight"] = cat(m + "self_attention.linear_proj.weight", 1)
        out.update(_mlp_to_hf(shards, hf, p, m))
        out[p + "post_attention_layernorm.weight"] = first[m + "pre_mlp_layernorm.weight"].clone()
    return out


def load_into(model, megatron_sd: dict) -> None:
    own = model.state_dict()
    missing = [k for k in megatron_sd if k not in own]
    if missing:
        raise KeyError(f"Megatron model has no parameter(s) {missing[:3]}")
    with torch.no_grad():
        for name, tensor in megatron_sd.items():
            own[name].copy_(tensor.to(own[name].dtype))


def trainable_state(model) -> dict:
    """Parameters only (no _extra_state), detached, in the model's dtype."""
    return {n: p.detach().clone() for n, p in model.named_parameters()}
