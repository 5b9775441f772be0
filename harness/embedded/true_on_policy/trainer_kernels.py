"""The trainer's lever switches that act inside Megatron's layers: GEMMs, embedding and fp8 operands.

Each linear layer of the policy is marked with its role (``mark``): ``qkv``, ``o-proj``, ``mlp``,
``lm-head`` (and ``expert`` on an MoE model). The patched ``_forward_impl`` of Megatron's column-
and row-parallel linears then reads the switches at every call:

- ``trainer-fp8-weights``: the weight as the rollout holds it, e4m3-rounded in 128x128 blocks of the
  HF tensors the engine receives (q, k, v apart; gate and up apart: harness.embedded.fp8), with the
  gradient passed straight through to the trainer's own weight; only where the rollout quantises
  (``configure_rollout(fp8=True)``) and only the layers it quantises (not the LM head);
- ``trainer-fp8-activations``: the layer's input e4m3-rounded in 1x128 groups, as the rollout's
  linear method rounds its input (not the LM head, whose engine op is no linear method, nor the
  experts, which vLLM runs through its fused-MoE method);
- ``trainer-engine-{qkv,o-proj}-gemm``, ``trainer-engine-mlp``, ``trainer-engine-lm-head``: the GEMM
  through vLLM's own CPU dispatch (``dispatch_cpu_unquantized_gemm`` on the trainer's weight: oneDNN
  or the small-GEMM kernel, as the engine's layer of that shape runs), with a torch-math backward.
With no switch on for the layer, the call goes to what was there before (Megatron's own GEMM, or a
numerical control installed before it). ``trainer-engine-embedding`` routes Megatron's word
embedding through vLLM's embedding op (TP=1). On an MoE model the MLP lever replaces the whole MoE
layer (router and experts) by vLLM's MoE ops (moe_kernel.py).
"""

from __future__ import annotations

import torch

from harness.embedded import fp8
from harness.embedded.true_on_policy import lever_on

ROLE = "_embedded_lever_role"
GEMM_SWITCH = {
    "qkv": "trainer-engine-qkv-gemm",
    "o-proj": "trainer-engine-o-proj-gemm",
    "mlp": "trainer-engine-mlp",
    "expert": "trainer-engine-mlp",
    "lm-head": "trainer-engine-lm-head",
}
FP8_WEIGHT_ROLES = ("qkv", "o-proj", "mlp", "expert")  # harness.embedded.fp8.QUANTIZED_WEIGHTS, by role
FP8_ACTIVATION_ROLES = ("qkv", "o-proj", "mlp")  # the layers vLLM runs through UnquantizedLinearMethod
_rollout_fp8 = False
_installed = False


def configure_rollout(*, fp8_rollout: bool) -> None:
    """Whether the rollout quantises to fp8: the fp8 switches are no-ops where it does not."""
    global _rollout_fp8
    _rollout_fp8 = bool(fp8_rollout)


def rollout_fp8() -> bool:
    return _rollout_fp8


def mark(model, hf_config) -> None:
    """Mark each linear of a Megatron GPTModel with its role (and, for fp8, the HF split of its weight)."""
    heads, groups, dim = hf_config.num_attention_heads, hf_config.num_key_value_heads, hf_config.head_dim
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "linear_qkv":
            module._embedded_split = ("qkv", heads, groups, dim)
            setattr(module, ROLE, "qkv")
        elif leaf == "linear_proj":
            setattr(module, ROLE, "o-proj")
        elif leaf in ("linear_fc1", "linear_fc2"):
            setattr(module, ROLE, "expert" if ".local_experts." in name else "mlp")
            if leaf == "linear_fc1":
                module._embedded_split = ("gate-up",)
        elif name == "output_layer":
            setattr(module, ROLE, "lm-head")


# ---------------------------------------------------------------- fp8 operands
def rollout_weight(module, weight: torch.Tensor) -> torch.Tensor:
    """`weight` as the fp8 rollout holds it: each HF tensor the engine receives quantised apart."""
    split = getattr(module, "_embedded_split", None)
    if split is None:
        return fp8.quantize_weight_blockwise(weight)
    if split[0] == "gate-up":
        return torch.cat([fp8.quantize_weight_blockwise(part) for part in torch.chunk(weight, 2, dim=0)], dim=0)
    _, heads, groups, dim = split
    per_group = heads // groups
    hidden = weight.shape[-1]
    grouped = weight.view(groups, (per_group + 2) * dim, hidden)
    q, k, v = torch.split(grouped, [per_group * dim, dim, dim], dim=1)
    q, k, v = (fp8.quantize_weight_blockwise(t.reshape(-1, hidden)) for t in (q, k, v))
    back = torch.cat([q.view(groups, per_group * dim, hidden), k.view(groups, dim, hidden), v.view(groups, dim, hidden)], dim=1)
    return back.reshape(weight.shape)


def _straight_through(value: torch.Tensor, quantised: torch.Tensor) -> torch.Tensor:
    """`quantised` forward, the identity backward (as a cast that rounds passes its gradient)."""
    return value + (quantised - value).detach()


# ---------------------------------------------------------------- vLLM's CPU GEMM
class _LayerView(torch.nn.Module):
    """What vLLM's CPU GEMM dispatch reads from a layer: its weight (and sets: cpu_linear)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = weight


def engine_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T by the kernel vLLM's CPU linear of this weight's shape and dtype runs."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = _LayerView(weight.detach().contiguous())
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return layer.cpu_linear(flat, layer.weight, None).reshape(*x.shape[:-1], weight.shape[0])


class _EngineGemm(torch.autograd.Function):
    """Forward: vLLM's CPU GEMM. Backward: the GEMM's gradients in torch math, in the operands' dtype."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return engine_linear(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad.matmul(weight.to(grad.dtype))
        grad_w = grad.reshape(-1, grad.shape[-1]).t().matmul(x.reshape(-1, x.shape[-1]).to(grad.dtype))
        return grad_x.to(x.dtype), grad_w.to(weight.dtype)


def _forward_impl(original):
    def forward_impl(self, input, weight, *args, **kwargs):
        role = getattr(self, ROLE, None)
        if role is None:
            return original(self, input, weight, *args, **kwargs)
        if _rollout_fp8 and role in FP8_WEIGHT_ROLES and lever_on("trainer-fp8-weights"):
            weight = _straight_through(weight, rollout_weight(self, weight.detach()))
        if _rollout_fp8 and role in FP8_ACTIVATION_ROLES and lever_on("trainer-fp8-activations"):
            input = _straight_through(input, fp8.quantize_activation_groups(input.detach()))
        if lever_on(GEMM_SWITCH[role]):
            if kwargs.get("bias") is not None:
                raise ValueError(f"{GEMM_SWITCH[role]}: the engine GEMM lever supports linears without bias")
            return _EngineGemm.apply(input, weight)
        return original(self, input, weight, *args, **kwargs)

    forward_impl._embedded_lever = True
    return forward_impl


def _embedding_forward(original):
    def forward(self, input_):
        if not lever_on("trainer-engine-embedding") or self.tp_group.size() > 1:
            return original(self, input_)
        from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

        return UnquantizedEmbeddingMethod().embedding(self, input_)

    forward._embedded_lever = True
    return forward


def install() -> None:
    """Patch Megatron's linears and word embedding (idempotent). Install after any numerical control
    on the same methods (harness.embedded.numeric_faults): with its switch off a layer calls through
    to the control, with it on the lever replaces that layer's kernel, control included."""
    global _installed
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding

    for cls in (ColumnParallelLinear, RowParallelLinear):
        if not getattr(cls._forward_impl, "_embedded_lever", False):
            cls._forward_impl = _forward_impl(cls._forward_impl)
    if not getattr(VocabParallelEmbedding.forward, "_embedded_lever", False):
        VocabParallelEmbedding.forward = _embedding_forward(VocabParallelEmbedding.forward)
    _installed = True  # the MoE layers' patch is moe_kernel's (kernel_patches installs both)


KERNEL_SWITCHES = ("trainer-engine-embedding", "trainer-fp8-weights", "trainer-fp8-activations", *sorted(set(GEMM_SWITCH.values())))
