"""What every selected-logprob operator promises, and the base class it implements.

An operator computes, for each token t, ``log_softmax(hidden[t] @ weight.T / temperature)[targets[t]]``
(or a declared variant of it, e.g. vLLM's processed log-probs). Its :class:`Contract` says where it
rounds and in which order it reduces, so the bench can show *why* two operators differ, not only
*that* they do. A Blackwell operator dropped in later fills in the same contract.
"""

from __future__ import annotations

import abc
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

Semantics = Literal["raw", "processed"]
# The registry's name for the boundary these operators compute (harness.operators.registry.names).
SELECTED_LOGPROB_BOUNDARY = "selected-logprob"


class Contract(BaseModel):
    """The numerical contract of one operator, recorded beside its bench results."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary: str = Field(description="One line: what the operator is.")
    operand_dtype: str = Field(description="dtype the GEMM reads (after any quantisation).")
    accumulate_dtype: str = Field(description="dtype of the GEMM accumulator.")
    logits_dtype: str = Field(description="dtype the logits exist in before the softmax ('none' if never stored).")
    rounds_at: list[str] = Field(description="Every point where a value is rounded, in order.")
    reduction_order: str = Field(description="How the vocabulary reduction (max, sum of exp) is ordered.")
    tp_handling: str = Field(description="What happens when the vocabulary is split over TP ranks.")
    semantics: Semantics = Field(default="raw", description="'raw' log-softmax, or vLLM 'processed' (top-k/top-p renormalised).")
    batch_invariant_by_design: bool = Field(description="Row results cannot depend on batch size, by construction.")
    tp_invariant_by_design: bool = Field(description="Row results cannot depend on the TP split, by construction.")
    has_backward: bool = Field(default=False, description="Gradients w.r.t. hidden and weight are available.")
    requires: list[str] = Field(default_factory=list, description="What must be present to run it (cuda, triton, liger_kernel, ...).")


class Operator(abc.ABC):
    """A selected-token log-prob implementation. Subclasses set ``name`` and ``contract``."""

    boundary = SELECTED_LOGPROB_BOUNDARY
    name: str
    contract: Contract
    # True where out-of-range targets cannot make the operator touch memory outside its operands
    # (it compares ids, never gathers by them): the range check then runs after the launch.
    targets_checked_after_launch: bool = False

    def available(self) -> tuple[bool, str]:
        """(can it run here, why not). The default checks ``contract.requires``."""
        from harness.operators.availability import missing_requirements

        missing = missing_requirements(self.contract.requires)
        if missing:
            return False, "needs " + ", ".join(missing)
        return True, ""

    def selected_logprobs(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float = 1.0,
        tp_size: int = 1,
    ) -> torch.Tensor:
        """Selected-token log-probs, shape [T], float32.

        hidden [T, H] and weight [V, H] are the LM head's operands (bf16 in production), targets [T]
        int64 token ids. ``tp_size`` > 1 splits the vocabulary into that many equal shards in this
        process (rank order) and combines them the way the operator's vocab-parallel path does.
        """
        _check_operands(hidden, weight, targets, temperature, tp_size, check_targets=not self.targets_checked_after_launch)
        out = self._selected_logprobs(hidden, weight, targets.long(), float(temperature), int(tp_size))
        if self.targets_checked_after_launch:
            # The operator never indexes memory by a target id, so its kernels may run before the
            # range check; the check's device sync then waits on them instead of idling the GPU.
            _check_target_range(targets, weight.shape[0])
        return out

    @abc.abstractmethod
    def _selected_logprobs(
        self, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, tp_size: int
    ) -> torch.Tensor: ...

    def describe(self) -> dict:
        ok, why = self.available()
        return {"name": self.name, "available": ok, "why_unavailable": why, "contract": self.contract.model_dump()}


class OperandError(ValueError):
    """Operands that no operator can take; the message names the argument and what was expected."""


def _check_target_range(targets, vocab: int) -> None:
    if targets.numel():
        lo, hi = (int(x) for x in torch.stack(torch.aminmax(targets)).tolist())  # one device sync, not two
        if lo < 0 or hi >= vocab:
            raise OperandError(f"targets must lie in [0, V={vocab}); got range [{lo}, {hi}]")


def _check_operands(hidden, weight, targets, temperature, tp_size, check_targets=True) -> None:
    if hidden.dim() != 2 or weight.dim() != 2:
        raise OperandError(f"hidden must be [T, H] and weight [V, H]; got hidden{tuple(hidden.shape)} weight{tuple(weight.shape)}")
    if hidden.shape[1] != weight.shape[1]:
        raise OperandError(f"hidden size differs: hidden has H={hidden.shape[1]}, weight has H={weight.shape[1]}")
    if targets.dim() != 1 or targets.shape[0] != hidden.shape[0]:
        raise OperandError(f"targets must be [T]={hidden.shape[0]}; got {tuple(targets.shape)}")
    if check_targets:
        _check_target_range(targets, weight.shape[0])
    if not temperature > 0:
        raise OperandError(f"temperature must be > 0; got {temperature}")
    if tp_size not in (1, 2, 4, 8) or weight.shape[0] % tp_size:
        raise OperandError(f"tp_size must be 1, 2, 4 or 8 and divide V={weight.shape[0]}; got {tp_size}")
