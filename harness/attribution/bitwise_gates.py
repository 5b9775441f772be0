"""Bitwise boundary gates: in a true-on-policy run, every boundary both engines captured must hold
the same bits (``torch.equal``), in forward order; the first one that does not is the lever that
stopped holding.

Reads the capture bundles of harness.embedded.capture (``capture_{rollout}.pt`` beside the probe
bundles). The gated boundaries are the model's (embedding, each layer's attention, MLP and
residual output, final norm, logits) and the log-probs each side recorded in the run (the
rollout's decode against the trainer's recompute). The capture's own ``selected_logprob`` /
``processed_logprob`` / ``logsumexp`` are not gated: the capture computes them with each side's
native operator, not with the one a true-on-policy trainer runs (harness.embedded.true_on_policy.logprobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from harness.embedded.capture import read_capture

MODEL_BOUNDARY_TAIL = ("final_norm", "logits")
RECORDED = "recorded_logprob"


def gated_boundaries(num_layers: int) -> list[str]:
    names = ["embedding"]
    for i in range(num_layers):
        names += [f"layer.{i}.attention", f"layer.{i}.mlp", f"layer.{i}.output"]
    return [*names, *MODEL_BOUNDARY_TAIL, RECORDED]


@dataclass(frozen=True)
class Gate:
    rollout_id: int
    sample: int
    boundary: str
    equal: bool
    max_abs_diff: float
    unequal_elements: int
    elements: int

    def describe(self) -> str:
        return (
            f"rollout {self.rollout_id}, sample {self.sample}: {self.boundary} not bitwise equal "
            f"({self.unequal_elements} of {self.elements} elements differ, max |diff| {self.max_abs_diff:.3g})"
        )


def _compare(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float, int, int]:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, float("inf"), a.numel(), a.numel()
    equal = torch.equal(a, b)
    diff = (a.double() - b.double()).abs()
    return equal, float(diff.max()) if diff.numel() else 0.0, int((a != b).sum()), a.numel()


def bundle_gates(bundle: dict) -> list[Gate]:
    """Every gated boundary of every captured sample, in forward order per sample."""
    names = gated_boundaries(int(bundle["policy"]["num_layers"]))
    gates = []
    for sample in bundle["samples"]:
        trainer, rollout = sample["trainer"], sample["rollout"]
        if trainer is None or rollout is None:
            continue
        for name in names:
            equal, worst, unequal, total = _compare(trainer[name], rollout[name])
            gates.append(Gate(int(bundle["rollout_id"]), int(sample["index"]), name, equal, worst, unequal, total))
    return gates


def run_gates(dumps_dir: Path) -> tuple[list[Gate], list[str]]:
    """(gates of every capture bundle under ``dumps_dir``, lines saying what could not be gated)."""
    gates, missing = [], []
    paths = sorted(Path(dumps_dir).glob("capture_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not paths:
        missing.append(f"{dumps_dir}: no capture_*.pt bundle")
    for path in paths:
        bundle = read_capture(path)
        missing += [f"{path.name}: {line}" for line in bundle["unavailable"]]
        gates += bundle_gates(bundle)
    return gates, missing


def first_unequal(gates: list[Gate]) -> Gate | None:
    return next((g for g in gates if not g.equal), None)
