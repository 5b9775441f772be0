"""The trainer side of true on-policy: Megatron modules that compute as the engine computes.

``block_spec`` is Megatron's local GPT layer spec with two kinds of submodule swapped:
- every RMSNorm (input, pre-MLP, q/k, and the block's final norm) -> ``EngineRMSNorm``;
- core attention -> ``EngineKernelAttention``.
Everything else (linears, rotary, residual adds, MLP) is Megatron's own: on this stack those
boundaries were already equal to the engine's once the engine runs its native ops.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.module import MegatronModule

from harness.embedded.megatron_cpu import on_cpu
from harness.embedded.true_on_policy import lever_on
from harness.embedded.true_on_policy.engine_settings import BLOCK_SIZE


class EngineRMSNorm(MegatronModule):
    """vLLM's RMSNorm formula (``vllm.ir.ops.rms_norm`` native): normalise in fp32, round to the
    weight's dtype, multiply by the weight, round to the input dtype. The weight lives in the model
    dtype, as the engine holds it after a weight sync."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_unused) -> None:
        super().__init__(config=config)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        orig_dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(dim=-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return (h.to(self.weight.dtype) * self.weight).to(orig_dtype)


def _vllm_cpu_attention_ops():
    from vllm.platforms import current_platform

    current_platform.import_kernels()  # loads torch.ops._C with the CPU attention kernel
    from vllm import _custom_ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return _custom_ops, _get_attn_isa


def kernel_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """vLLM's CPU attention kernel over whole sequences, laid out as the engine lays out a prefill.

    query [s, b, heads, d], key/value [s, b, groups, d] (Megatron's layout, right-padded rows:
    causal, so padding after a token never reaches it) -> context [s, b, heads * d]. Each batch row
    is one request with its own KV blocks of the engine's block size; KV splitting is off, as in
    the engine, so a row's result does not depend on how many rows run beside it."""
    ops, attn_isa = _vllm_cpu_attention_ops()
    s, b, heads, d = query.shape
    groups = key.shape[2]
    blocks_per_row = -(-s // BLOCK_SIZE)
    # The engine's cache layout: [blocks, kv heads, block, 2 * d], viewed and split into K and V.
    cache = torch.zeros(b * blocks_per_row, groups, BLOCK_SIZE, 2 * d, dtype=query.dtype)
    key_cache, value_cache = cache.view(b * blocks_per_row, groups, BLOCK_SIZE * 2, d).chunk(2, dim=2)
    tokens = torch.arange(s)
    blocks = torch.arange(b).unsqueeze(1) * blocks_per_row + tokens // BLOCK_SIZE
    slots = (blocks * BLOCK_SIZE + tokens % BLOCK_SIZE).reshape(-1).to(torch.int64)
    block_table = torch.arange(b * blocks_per_row, dtype=torch.int32).view(b, blocks_per_row)
    query_start = torch.arange(b + 1, dtype=torch.int32) * s
    seq_lens = torch.full((b,), s, dtype=torch.int32)
    isa = attn_isa(query.dtype, BLOCK_SIZE, d, "auto")

    def rows(t: torch.Tensor) -> torch.Tensor:  # [s, b, h, d] -> [b * s, h, d], token-major per row
        return t.transpose(0, 1).reshape(b * s, t.shape[2], d).contiguous()

    ops.cpu_attn_reshape_and_cache(rows(key), rows(value), key_cache, value_cache, slots, isa)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=b,
        num_heads=heads,
        num_kv_heads=groups,
        head_dim=d,
        seq_lens=seq_lens,
        dtype=query.dtype,
        query_start_loc=query_start,
        causal=True,
        sliding_window_size=-1,
        isa=isa,
        enable_kv_split=False,
    )
    out = torch.empty(b * s, heads, d, dtype=query.dtype)
    ops.cpu_attention_with_kv_cache(
        query=rows(query),
        key_cache=key_cache,
        value_cache=value_cache,
        output=out,
        query_start_loc=query_start,
        seq_lens=seq_lens,
        scale=scale,
        causal=True,
        alibi_slopes=None,
        sliding_window=-1,
        block_table=block_table,
        softcap=0.0,
        scheduler_metadata=metadata,
        s_aux=None,
    )
    return out.view(b, s, heads * d).transpose(0, 1).contiguous()


class _KernelForwardMathBackward(torch.autograd.Function):
    """Forward: the engine's kernel. Backward: the gradient of Megatron's own torch-math attention
    (DotProductAttention) at the same inputs, recomputed."""

    @staticmethod
    def forward(ctx, query, key, value, module, attention_mask):
        ctx.module, ctx.attention_mask = module, attention_mask
        ctx.save_for_backward(query, key, value)
        return kernel_attention(query, key, value, module.engine_scale)

    @staticmethod
    def backward(ctx, grad_context):
        inputs = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with torch.enable_grad(), on_cpu():
            context = DotProductAttention.forward(ctx.module, *inputs, ctx.attention_mask)
            grads = torch.autograd.grad(context, inputs, grad_context)
        return (*grads, None, None)


class EngineKernelAttention(DotProductAttention):
    """Megatron core attention whose forward is vLLM's CPU attention kernel (see kernel_attention)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The engine's scale (Qwen3Attention: head_dim ** -0.5), not 1/math.sqrt(d): they may differ
        # in the last bit.
        self.engine_scale = self.hidden_size_per_attention_head**-0.5

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None):
        if attention_bias is not None or packed_seq_params is not None:
            raise ValueError("EngineKernelAttention: attention bias and packed sequences are not supported")
        return _KernelForwardMathBackward.apply(query, key, value, self, attention_mask)


def block_spec(num_experts: int | None, num_layers: int):
    """Megatron's local GPT layer spec with the engine-formula norms and the engine's attention
    kernel, as TransformerBlockSubmodules so that the block's final norm is swapped too."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    layer = get_gpt_layer_local_spec(num_experts=num_experts, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm")
    sub = layer.submodules
    attention = sub.self_attention.submodules
    final_norm = sub.input_layernorm  # Megatron's own (what the local spec's block uses)
    if lever_on("trainer-engine-input-norm"):
        sub.input_layernorm = EngineRMSNorm
    if lever_on("trainer-engine-qk-norm"):
        attention.q_layernorm = attention.k_layernorm = EngineRMSNorm
    if lever_on("trainer-engine-pre-mlp-norm"):
        sub.pre_mlp_layernorm = EngineRMSNorm
    if lever_on("trainer-engine-final-norm"):
        final_norm = EngineRMSNorm
    if lever_on("trainer-engine-attention"):
        attention.core_attention = EngineKernelAttention
    return TransformerBlockSubmodules(layer_specs=[layer] * num_layers, layer_norm=final_norm)
