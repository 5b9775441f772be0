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


def synthetic_bundle(shape: BundleShape, dtype: torch.dtype = torch.bfloat16) -> Bundle:
    gen = torch.Generator().manual_seed(shape.seed)
    weight = torch.randn(shape.vocab, shape.hidden, generator=gen).mul_(0.03)
    targets = torch.randint(0, shape.vocab, (shape.tokens,), generator=gen)
    direction = weight[targets]
    direction /= direction.pow(2).mean(dim=1, keepdim=True).sqrt()
    strength = torch.rand(shape.tokens, 1, generator=gen).mul_(3.0)
    hidden = torch.randn(shape.tokens, shape.hidden, generator=gen).add_(direction * strength)
    hidden /= hidden.pow(2).mean(dim=1, keepdim=True).sqrt()  # RMSNorm output, gain 1
    return Bundle(hidden.to(dtype), weight.to(dtype), targets, f"synthetic(seed={shape.seed})")


class BundleError(ValueError):
    """A probe bundle file that cannot be used; the message names the file and the key."""


def load_bundle(path: str | Path) -> Bundle:
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file")
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
