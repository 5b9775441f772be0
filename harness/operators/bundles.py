"""Fixed-tensor bundles for the operator bench: the LM head's operands (hidden, weight, targets).

Two sources: a synthetic bundle drawn from a seeded CPU generator (the same tensors on every machine),
shaped like a trained LM head (weight std 0.03; RMS-normalised hidden states pushed toward their
target's weight row with a random strength, so log-probs span confident to flat), or a probe bundle
saved by the embedded trainer (a safetensors file with ``hidden`` [T, H], ``weight`` [V, H] and
``targets`` [T]).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# Qwen3-30B-A3B's output layer.
PRODUCTION_H = 2048
PRODUCTION_V = 151936


@dataclass(frozen=True)
class BundleShape:
    tokens: int
    hidden: int
    vocab: int
    seed: int = 0

    def as_dict(self) -> dict:
        return {"T": self.tokens, "H": self.hidden, "V": self.vocab, "seed": self.seed}


@dataclass
class Bundle:
    hidden: torch.Tensor  # [T, H]
    weight: torch.Tensor  # [V, H]
    targets: torch.Tensor  # [T] int64
    source: str

    @property
    def shape(self) -> dict:
        return {
            "T": self.hidden.shape[0],
            "H": self.hidden.shape[1],
            "V": self.weight.shape[0],
            "dtype": str(self.hidden.dtype).removeprefix("torch."),
        }

    def to(self, device) -> Bundle:
        return Bundle(self.hidden.to(device), self.weight.to(device), self.targets.to(device), self.source)


def synthetic_bundle(
    shape: BundleShape,
    dtype: torch.dtype = torch.bfloat16,
    weight_std: float = 0.03,
    strength=(0.0, 3.0),
    runner_up=None,
    runner_ups: int = 1,
    noise: float = 1.0,
) -> Bundle:
    """``weight_std`` scales the logits; each hidden state is pushed toward its target's weight row by a
    strength drawn uniformly from ``strength``; with ``runner_up`` (lo, hi) also toward ``runner_ups`` other
    random tokens, each by that strength times its own ratio drawn from [lo, hi], as a trained LM leaves its
    missing mass on a few alternatives (regimes.py names the combinations the bench uses). ``noise`` scales the
    random part of each hidden state (the logits' spread over the vocabulary outside the pushed tokens)."""
    gen = torch.Generator().manual_seed(shape.seed)
    weight = torch.randn(shape.vocab, shape.hidden, generator=gen).mul_(weight_std)
    targets = torch.randint(0, shape.vocab, (shape.tokens,), generator=gen)
    direction = weight[targets]
    direction /= direction.pow(2).mean(dim=1, keepdim=True).sqrt()
    lo, hi = strength
    strength = torch.rand(shape.tokens, 1, generator=gen).mul_(hi - lo).add_(lo)
    hidden = torch.randn(shape.tokens, shape.hidden, generator=gen).mul_(noise).add_(direction * strength)
    # drawn after the rest, each runner-up after the one before, so a bundle with fewer keeps its tensors
    for _ in range(runner_ups if runner_up is not None else 0):
        other = torch.randint(0, shape.vocab, (shape.tokens,), generator=gen)
        ratio = torch.rand(shape.tokens, 1, generator=gen).mul_(runner_up[1] - runner_up[0]).add_(runner_up[0])
        alt = weight[other]
        alt /= alt.pow(2).mean(dim=1, keepdim=True).sqrt()
        hidden.add_(alt * strength * ratio)
    hidden /= hidden.pow(2).mean(dim=1, keepdim=True).sqrt()  # RMSNorm output, gain 1
    return Bundle(hidden.to(dtype), weight.to(dtype), targets, f"synthetic(seed={shape.seed})")


class BundleError(ValueError):
    """A probe bundle file that cannot be used; the message names the file and the key."""


def load_bundle(path: str | Path) -> Bundle:
    """A safetensors bundle (hidden [T,H], weight [V,H], targets [T]) or an embedded trainer's probe bundle
    (``probe_{rollout}.pt``: ``lm_head_weight`` and ``samples`` with ``hidden_states`` and ``target_ids``,
    every sample's rows concatenated)."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file")
    if path.suffix == ".pt":
        return _load_probe(path)
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except Exception as exc:
        raise BundleError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None
    for key, dims in (("hidden", 2), ("weight", 2), ("targets", 1)):
        if key not in tensors:
            raise BundleError(f"{path}: missing key {key!r} (expected hidden [T,H], weight [V,H], targets [T])")
        if tensors[key].dim() != dims:
            raise BundleError(f"{path}: key {key!r} has shape {tuple(tensors[key].shape)}, expected {dims} dims")
    return Bundle(tensors["hidden"], tensors["weight"], tensors["targets"].long(), f"probe({path.name})")


def _load_probe(path: Path) -> Bundle:
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BundleError(f"{path}: not a readable probe bundle ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or "lm_head_weight" not in data or not data.get("samples"):
        raise BundleError(f"{path}: a .pt bundle must be an embedded probe bundle (keys lm_head_weight and samples)")
    for i, sample in enumerate(data["samples"]):
        for key in ("hidden_states", "target_ids"):
            if key not in sample:
                raise BundleError(f"{path}: samples[{i}] has no key {key!r}")
    weight = data["lm_head_weight"]
    hidden = torch.cat([s["hidden_states"] for s in data["samples"]]).to(weight.dtype)
    targets = torch.cat([s["target_ids"] for s in data["samples"]]).long()
    return Bundle(hidden, weight, targets, f"capture({path.name}, rollout {data.get('rollout_id')})")
