"""``--embedded-linear-operator NAME``: one linear operator in both engines, at the fp8-weights boundary.

NAME is an operator of the registry's linear boundary (harness.operators.registry.names
("fp8-weight-linear"), contract in harness.operators.linear_contract); ``native`` (the default) keeps
each engine's own GEMM. The operator computes every attention and MLP linear of the decoder (q/k/v,
o, gate/up, down; not the LM head, not the embedding) from the layer's input and the weight as the
rollout holds it:

- Rollout: vLLM's CPU linear dispatch (``dispatch_cpu_unquantized_gemm``, which packs the weight
  for oneDNN at every load) is wrapped so that each linear layer keeps the weight it was loaded with
  and computes through the operator instead of its packed kernel. What reaches the call is what the
  engine's linear method passes: on an FP8 rollout its input already rounded to e4m3 groups (the
  activation emulation stays the engine's own; the fp8-activations boundary is left native).
- Trainer (recompute, training pass and capture alike): Megatron's column- and row-parallel
  ``_forward_impl`` of the layers marked qkv / o-proj / mlp (harness.embedded.true_on_policy.
  trainer_kernels.mark) computes ``operator(x, w)`` with ``w`` the trainer's weight put into the
  rollout's form (e4m3 128x128 blocks per HF tensor on an FP8 rollout, ``rollout_weight``; the weight
  itself otherwise), the gradient passed straight through to its own weight, and the GEMM's gradients
  in torch math.
Both count their calls inside the call (pass ``linear``, harness.embedded.operator_calls), and the
trainer logs one ``rl_kernel.execution_decision`` a rollout (op ``fp8_weight_linear``) from what was
counted. The engine side is installed in whichever process runs it (``install_from_env``: the
trainer sets ``ENV_FLAG`` before the engine starts; the non-colocate server's processes through
engine_site/sitecustomize.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os

import torch

from harness.embedded import operator_calls

NATIVE = "native"
ENV_FLAG = "EMBEDDED_LINEAR_OPERATOR"
LINEAR_PASS = "linear"
DECISION_OP = "fp8_weight_linear"
ROLES = ("qkv", "o-proj", "mlp")  # harness.embedded.true_on_policy.trainer_kernels roles the rollout quantises
_MARK = "_embedded_linear_operator"
_trainer: dict = {}  # {"op": the operator, "fp8": whether the rollout quantises}


class LinearOperatorChoiceError(ValueError):
    """A NAME the embedded trainer cannot use; the message is one line for the user."""


def usable_names() -> list[str]:
    from harness.operators import registry
    from harness.operators.linear_contract import LINEAR_BOUNDARY

    return registry.available_names(LINEAR_BOUNDARY)


def resolve(name: str | None):
    """The linear operator NAME (None for native), or LinearOperatorChoiceError with one line."""
    if name in (None, NATIVE):
        return None
    from harness.operators import registry
    from harness.operators.linear_contract import LINEAR_BOUNDARY

    flag = f"--embedded-linear-operator {name}"
    if name not in registry.names(LINEAR_BOUNDARY):
        raise LinearOperatorChoiceError(f"{flag}: no linear operator of that name; expected {NATIVE} or one of {', '.join(usable_names())}")
    op = registry.get(name)
    ok, why = op.available()
    if not ok:
        raise LinearOperatorChoiceError(f"{flag}: cannot run here ({why}); expected {NATIVE} or one of {', '.join(usable_names())}")
    return op


def expected_operators(name: str) -> list[dict]:
    """The (side, pass, operator) triples the flag asks both sides to run (operator_calls.json's expected)."""
    if name in (None, NATIVE):
        return []
    return [{"side": side, "pass": LINEAR_PASS, "operator": name} for side in (operator_calls.TRAINER, operator_calls.ROLLOUT)]


# ---------------------------------------------------------------- trainer side
class _OperatorLinear(torch.autograd.Function):
    """Forward: the operator. Backward: the GEMM's gradients in torch math, in the operands' dtype."""

    @staticmethod
    def forward(ctx, x, weight, op):
        ctx.save_for_backward(x, weight)
        return op.linear(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad.matmul(weight.to(grad.dtype))
        grad_w = grad.reshape(-1, grad.shape[-1]).t().matmul(x.reshape(-1, x.shape[-1]).to(grad.dtype))
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


def _forward_impl(original):
    def forward_impl(self, input, weight, *args, **kwargs):
        from harness.embedded.true_on_policy.trainer_kernels import ROLE, rollout_weight

        op = _trainer.get("op")
        if op is None or getattr(self, ROLE, None) not in ROLES:
            return original(self, input, weight, *args, **kwargs)
        rows = input.numel() // input.shape[-1]
        if kwargs.get("bias") is not None or (args and args[0] is not None):
            operator_calls.count(operator_calls.TRAINER, LINEAR_PASS, NATIVE, rows)  # a layer with a bias: not the operator's
            return original(self, input, weight, *args, **kwargs)
        used = weight
        if _trainer["fp8"]:
            # the rollout's FP8 weight forward, the identity backward onto the trainer's own weight
            used = weight + (rollout_weight(self, weight.detach()) - weight).detach()
        out = _OperatorLinear.apply(input, used, op)
        operator_calls.count(operator_calls.TRAINER, LINEAR_PASS, op.name, rows)  # after it returned
        return out

    forward_impl._embedded_linear_operator = True
    return forward_impl


def install_in_trainer(name: str, *, fp8_rollout: bool) -> None:
    """Route the trainer's marked linears through the operator NAME (idempotent per process)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    op = resolve(name)
    if op is None:
        return
    _trainer.update(op=op, fp8=bool(fp8_rollout))
    for cls in (ColumnParallelLinear, RowParallelLinear):
        if not getattr(cls._forward_impl, _MARK, False):
            cls._forward_impl = _forward_impl(cls._forward_impl)


# ---------------------------------------------------------------- rollout side (inside vLLM)
def _engine_call(op, weight: torch.Tensor, x: torch.Tensor, _packed_weight, bias=None) -> torch.Tensor:
    if bias is not None:
        raise RuntimeError(f"linear operator {op.name}: the engine's layer has a bias; the operator computes x @ W.T only")
    out = op.linear(x, weight)
    operator_calls.count(operator_calls.ROLLOUT, LINEAR_PASS, op.name, x.numel() // x.shape[-1])
    return out


def install_in_vllm(name: str) -> None:
    """Route every linear layer vLLM's CPU dispatch packs through the operator NAME (idempotent)."""
    from vllm.model_executor.layers import utils
    from vllm.model_executor.layers.linear import LinearBase

    installed = getattr(utils.dispatch_cpu_unquantized_gemm, _MARK, None)
    if installed == name:
        return
    if installed is not None:
        raise RuntimeError(f"vLLM's linears already run {installed!r}; cannot switch to {name!r} in one process")
    op = resolve(name)
    if op is None:
        return
    original = utils.dispatch_cpu_unquantized_gemm

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        weight = layer.weight
        keep = isinstance(layer, LinearBase) and not weight.is_meta and weight.ndim == 2
        held = weight.detach().clone() if keep else None  # what the engine was loaded with, before packing drops it
        original(layer, remove_weight)
        if keep:
            layer.cpu_linear = functools.partial(_engine_call, op, held)

    setattr(dispatch_cpu_unquantized_gemm, _MARK, name)
    # every later load (a weight sync's reload) packs through this name, wherever it is imported from
    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def install_from_env() -> None:
    """In an engine process the trainer started with ENV_FLAG set to an operator's name."""
    name = os.environ.get(ENV_FLAG)
    if name and name != NATIVE:
        install_in_vllm(name)


# ---------------------------------------------------------------- the execution decision
def execution_decision(logger: logging.Logger, *, requested: str, ran: dict[str, int], dtype: str, tp: int, rank: int = 0) -> dict:
    """RL-Align's ``rl_kernel.execution_decision`` record for the linear layers: ``ran`` is the
    trainer's counted rows per operator this rollout; anything but the requested operator alone is a fallback."""
    actual = "+".join(sorted(ran)) or "none"
    executed = actual == requested
    record = {
        "op": DECISION_OP,
        "requested_backend": requested,
        "actual_backend": actual,
        "decision": "optimized" if executed else "fallback-not-executed",
        "fallback_reason": None if executed else f"the trainer's linears counted {ran or 'no rows'}, not {requested!r} alone",
        "counted_tokens": dict(ran),
        "dtype": dtype,
        "tp_size": tp,
        "tp_rank": rank,
        "cp_size": 1,
        "implementation": f"harness.operators.registry {requested!r} in the trainer's linears and vLLM's CPU linear dispatch",
    }
    logger.info("rl_kernel.execution_decision %s", json.dumps(record, sort_keys=True), stacklevel=2)
    return record
