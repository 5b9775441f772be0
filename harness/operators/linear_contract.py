"""Operators at the linear-layer boundary: ``y = x @ weight.T`` with the weight as the rollout holds it.

The selected-log-prob operators (harness.operators.contract) sit at the LM head. The drift budget
(knobs/levers.yaml) puts the largest operator share of the FP8 rungs at another boundary: the FP8
quantise/dequantise of the linear layers' weights (lever ``fp8-weights``). An operator of this kind
computes one attention or MLP linear of the decoder, from

- ``x`` [..., K]: the layer's input as the calling engine computed it (bf16 in production);
- ``weight`` [N, K]: the layer's weight as the rollout engine holds it: on an FP8 rollout each HF
  tensor e4m3-rounded in 128x128 blocks with one fp32 scale a block, dequantised to the model dtype
  (harness.embedded.fp8.quantize_weight_blockwise); otherwise the weight itself;

and returns y [..., N] in x's dtype. Both engines call it: the rollout engine on the weight it was
synced with, the trainer on its own weight put into the rollout's form (the gradient passes straight
through to its own weight). Its :class:`LinearContract` says where it rounds and in which order it
reduces, as the log-prob operators' contract does; invariance is measured, not trusted.
"""

from __future__ import annotations

import abc

import torch
from pydantic import BaseModel, ConfigDict, Field

# The registry's name for this boundary (harness.operators.registry.names(boundary=...)).
LINEAR_BOUNDARY = "fp8-weight-linear"


class LinearContract(BaseModel):
    """The numerical contract of one linear operator, recorded beside its bench rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary: str = Field(description="One line: what the operator is.")
    weight_form: str = Field(description="What the weight operand is (the rollout's FP8 blocks dequantised, or as held).")
    operand_dtype: str = Field(description="dtype the products read.")
    accumulate_dtype: str = Field(description="dtype of the running sum over K.")
    rounds_at: list[str] = Field(description="Every point where a value is rounded, in order.")
    reduction_order: str = Field(description="How the sum over K is ordered.")
    batch_invariant_by_design: bool = Field(description="A row's result cannot depend on the other rows, by construction.")
    gpu_form: str = Field(description="What this operator is on a GPU (the kernel a Blackwell build would ship).")
    requires: list[str] = Field(default_factory=list, description="What must be present to run it.")


class LinearOperandError(ValueError):
    """Operands no linear operator can take; the message names the argument and what was expected."""


class LinearOperator(abc.ABC):
    """One implementation of the linear boundary. Subclasses set ``contract`` and ``_linear``."""

    boundary = LINEAR_BOUNDARY
    name: str
    contract: LinearContract

    def available(self) -> tuple[bool, str]:
        from harness.operators.availability import missing_requirements

        missing = missing_requirements(self.contract.requires)
        return (False, "needs " + ", ".join(missing)) if missing else (True, "")

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x [..., K] @ weight[N, K].T -> [..., N] in x's dtype, no bias."""
        if weight.dim() != 2:
            raise LinearOperandError(f"weight must be [N, K]; got {tuple(weight.shape)}")
        if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
            raise LinearOperandError(f"x must be [..., K={weight.shape[1]}]; got {tuple(x.shape)}")
        if not (x.is_floating_point() and weight.is_floating_point()):
            raise LinearOperandError(f"x and weight must be floating point; got {x.dtype} and {weight.dtype}")
        flat = x.reshape(-1, x.shape[-1])
        return self._linear(flat, weight).reshape(*x.shape[:-1], weight.shape[0])

    @abc.abstractmethod
    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def describe(self) -> dict:
        ok, why = self.available()
        return {"name": self.name, "boundary": self.boundary, "available": ok, "why_unavailable": why, "contract": self.contract.model_dump()}
