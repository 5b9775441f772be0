"""Shared pieces of the operator tests: thresholds, devices, small fixed bundles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fixtures.knobs import session_knobs
from harness.operators.bundles import BundleShape, synthetic_bundle

THRESHOLDS_FILE = Path(__file__).resolve().parents[2] / "knobs" / "operator_thresholds.yaml"

# Small shapes so CI exercises every path: V=4000 leaves forward chunks of 33-34 columns and backward
# groups of 500, so every chunk's tile and every group's last slice is partly masked; T=200 is not a
# multiple of any row block.
SMALL = BundleShape(tokens=200, hidden=256, vocab=4000, seed=0)

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")),
]


def threshold(name: str) -> float:
    data = {name: entry.model_dump() for name, entry in session_knobs().operator_thresholds.items()}  # loaded once, --knobs honoured
    if name not in data:
        raise KeyError(f"{THRESHOLDS_FILE}: no threshold named {name!r}")
    return float(data[name]["value"])


@pytest.fixture(scope="session")
def small_bundle_cpu():
    return synthetic_bundle(SMALL)


@pytest.fixture(params=DEVICES)
def small_bundle(request, small_bundle_cpu):
    return small_bundle_cpu.to(request.param)
