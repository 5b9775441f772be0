"""Whether an operator's requirements are met on this machine (CUDA, Triton, optional packages)."""

from __future__ import annotations

import functools
import importlib.util

import torch


@functools.cache
def _has(requirement: str) -> bool:
    if requirement == "cuda":
        return torch.cuda.is_available()
    if requirement == "triton":
        # Triton imports on CPU-only machines too; its kernels need a GPU.
        return importlib.util.find_spec("triton") is not None and torch.cuda.is_available()
    if requirement == "fp8":
        return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    return importlib.util.find_spec(requirement) is not None


def missing_requirements(requirements: list[str]) -> list[str]:
    return [r for r in requirements if not _has(r)]
