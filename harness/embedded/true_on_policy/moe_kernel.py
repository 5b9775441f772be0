"""The MLP lever on an MoE model: the trainer's router and experts through vLLM's own CPU MoE ops.

With ``trainer-engine-mlp`` on, a Megatron MoE layer (TP=1, no expert parallelism) computes as the
engine's fused-MoE block does, on the trainer's own weights:
- router logits: the gate GEMM in the model dtype through vLLM's CPU GEMM dispatch (the engine's
  gate is a linear in the model dtype; Megatron computes its router in fp32), its input e4m3-rounded
  where the rollout quantises and ``trainer-fp8-activations`` is on (the engine's gate is one of the
  linears its fp8 emulation rounds the input of);
- top-k: vLLM's CPU router (softmax over the top-k logits, renormalised: Qwen3's norm_topk_prob);
- experts: vLLM's ``cpu_fused_moe`` kernel on the experts' weights stacked as the engine holds them
  (``w13`` = [gate; up] per expert, ``w2`` = down) and prepacked as the engine's CPU experts class
  prepacks them, e4m3-rounded per HF tensor where ``trainer-fp8-weights`` is on.
The backward is the same computation in torch math (Megatron's experts' arithmetic, an explicit
loop over experts), recomputed at the saved inputs. With the switch off the layer is Megatron's own
(its router, its dispatcher, its SequentialMLP, and any numerical control installed on them).
"""

from __future__ import annotations

import torch

from harness.embedded import fp8
from harness.embedded.true_on_policy import lever_on

SWITCH = "trainer-engine-mlp"
ALIGNMENT = 32  # the CPU experts kernel's output alignment (vLLM's CPUUnquantizedExperts)


def _isa(dtype: torch.dtype) -> str:
    """The CPU experts kernel vLLM picks on this machine: its AMX class where the CPU has AMX tiles and
    the activations are bf16, its vector class otherwise (vLLM's X86CPUUnquantizedExperts / CPUUnquantizedExperts)."""
    return "amx" if dtype == torch.bfloat16 and torch.cpu._is_amx_tile_supported() else "vec"


def _routing(gate_input: torch.Tensor, router_weight: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from vllm.model_executor.layers.fused_moe.router.cpu_router import _softmax_topk

    from harness.embedded.true_on_policy.trainer_kernels import engine_linear

    logits = engine_linear(gate_input, router_weight.to(gate_input.dtype))
    return _softmax_topk(logits, top_k, True)


def engine_moe(x: torch.Tensor, gate_input: torch.Tensor, router_weight, w13, w2, top_k: int) -> torch.Tensor:
    """The engine's fused-MoE block on these operands: [tokens, hidden] -> [tokens, hidden]."""
    from vllm import _custom_ops as ops

    topk_weights, topk_ids = _routing(gate_input, router_weight, top_k)
    experts, two_i, hidden = w13.shape
    inter = two_i // 2
    padded = -(-inter // ALIGNMENT) * ALIGNMENT
    if padded != inter:  # the kernel's intermediate alignment, zero-padded as vLLM pads it
        w13 = torch.cat(
            [torch.nn.functional.pad(w13[:, :inter], (0, 0, 0, padded - inter)), torch.nn.functional.pad(w13[:, inter:], (0, 0, 0, padded - inter))],
            1,
        )
        w2 = torch.nn.functional.pad(w2, (0, padded - inter))
    isa = _isa(x.dtype)
    packed13, packed2 = ops.cpu_prepack_moe_weight(w13.contiguous(), isa), ops.cpu_prepack_moe_weight(w2.contiguous(), isa)
    out = torch.empty_like(x)
    ops.cpu_fused_moe(out, x.contiguous(), packed13, packed2, None, None, topk_weights, topk_ids, "silu", isa, False)
    return out


def reference_moe(x, gate_input, router_weight, w13, w2, top_k: int) -> torch.Tensor:
    """The same block in torch math (differentiable): the backward's computation."""
    logits = torch.nn.functional.linear(gate_input, router_weight.to(gate_input.dtype))
    top_logits, top_ids = torch.topk(logits, k=top_k, dim=-1)
    weights = torch.softmax(top_logits.float(), dim=-1)
    out = torch.zeros(x.shape, dtype=torch.float32)
    inter = w13.shape[1] // 2
    for expert in range(w13.shape[0]):
        rows, slot = (top_ids == expert).nonzero(as_tuple=True)
        if len(rows) == 0:
            continue
        h = x[rows]
        act = torch.nn.functional.silu(h @ w13[expert, :inter].t()) * (h @ w13[expert, inter:].t())
        out = out.index_add(0, rows, (act @ w2[expert].t()).float() * weights[rows, slot].unsqueeze(-1))
    return out.to(x.dtype)


class _EngineMoE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate_input, router_weight, w13, w2, top_k):
        ctx.top_k = top_k
        ctx.save_for_backward(x, gate_input, router_weight, w13, w2)
        return engine_moe(x, gate_input, router_weight, w13, w2, top_k)

    @staticmethod
    def backward(ctx, grad):
        inputs = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with torch.enable_grad():
            out = reference_moe(*inputs, ctx.top_k)
            grads = torch.autograd.grad(out, inputs, grad, allow_unused=True)
        return (*grads, None)


def _stacked(layer) -> tuple[torch.Tensor, torch.Tensor]:
    """The experts' weights as the engine stacks them ([E, 2I, H] and [E, H, I]), in the graph."""
    from harness.embedded.true_on_policy.trainer_kernels import _straight_through, rollout_fp8, rollout_weight

    fc1 = [expert.linear_fc1.weight for expert in layer.experts.local_experts]
    fc2 = [expert.linear_fc2.weight for expert in layer.experts.local_experts]
    if rollout_fp8() and lever_on("trainer-fp8-weights"):
        fc1 = [_straight_through(w, rollout_weight(e.linear_fc1, w.detach())) for w, e in zip(fc1, layer.experts.local_experts)]
        fc2 = [_straight_through(w, fp8.quantize_weight_blockwise(w.detach())) for w in fc2]
    return torch.stack(fc1), torch.stack(fc2)


def _moe_forward(original):
    def forward(self, hidden_states, intermediate_tensors=None, padding_mask=None):
        if not lever_on(SWITCH) or intermediate_tensors is not None or not hasattr(self.experts, "local_experts"):
            return original(self, hidden_states, intermediate_tensors, padding_mask)
        from harness.embedded.true_on_policy.trainer_kernels import _straight_through, rollout_fp8

        s, b, h = hidden_states.shape
        x = hidden_states.reshape(s * b, h)
        gate_input = x
        if rollout_fp8() and lever_on("trainer-fp8-activations"):
            gate_input = _straight_through(x, fp8.quantize_activation_groups(x.detach()))
        w13, w2 = _stacked(self)
        out = _EngineMoE.apply(x, gate_input, self.router.weight, w13, w2, self.router.topk)
        return out.view(s, b, h), None

    forward._embedded_lever = True
    return forward


def _gating(original):
    """The router's input e4m3-rounded where the rollout quantises (its gate is a quantised-input linear)."""

    def gating(self, input):
        from harness.embedded.true_on_policy.trainer_kernels import _straight_through, rollout_fp8

        if rollout_fp8() and lever_on("trainer-fp8-activations"):
            input = _straight_through(input, fp8.quantize_activation_groups(input.detach()))
        return original(self, input)

    gating._embedded_lever = True
    return gating


def install() -> None:
    """Patch Megatron's MoE layer and router (idempotent; inert with the switches off)."""
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.moe.router import TopKRouter

    if not getattr(MoELayer.forward, "_embedded_lever", False):
        MoELayer.forward = _moe_forward(MoELayer.forward)
    if not getattr(TopKRouter.gating, "_embedded_lever", False):
        TopKRouter.gating = _gating(TopKRouter.gating)
