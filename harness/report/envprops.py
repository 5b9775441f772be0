"""environment.properties in the Allure results directory: the report's "Environment" panel.

Written at the end of a pytest session by fixtures/report.py (it knows --backend and --mode), and
by `python -m harness report` when the session did not write one. Figures come from the same
probes as each run's environment record (harness/records/environment.py): package metadata, no
heavy imports.
"""

from __future__ import annotations

import platform
import socket
from pathlib import Path

FILE_NAME = "environment.properties"


def _version(versions: dict, role: str) -> str:
    entry = versions.get(role)
    if isinstance(entry, dict):
        return f"{entry.get('version')} ({entry.get('package')})" if entry.get("package") != role else str(entry.get("version"))
    return "not installed"


def environment_properties(*, backend: str | None = None, mode: str | None = None) -> dict[str, str]:
    from harness.records.commit import harness_commit
    from harness.records.environment import collect_environment

    environment = collect_environment(None, None)
    versions = environment.get("versions") or {}
    hardware = environment.get("hardware") or {}
    gpus = hardware.get("gpus") or {}
    cpu = hardware.get("cpu") or {}
    commit = harness_commit()
    properties = {
        "host": socket.gethostname(),
        "harness.commit": (commit.commit or "unknown") + (" (dirty)" if commit.dirty else ""),
        "backend": backend or "not given",
        "mode": mode or "not given",
        "hardware": (
            f"{gpus['count']}x {'/'.join(gpus.get('models') or [])}"
            if gpus.get("count")
            else f"CPU {cpu.get('model')}, {cpu.get('cores')} cores, no GPU"
        ),
        "python": platform.python_version(),
        "torch": _version(versions, "torch"),
        "vllm": _version(versions, "vllm"),
        "megatron-core": _version(versions, "megatron-core"),
        "ray": _version(versions, "ray"),
        "container.image": (environment.get("container") or {}).get("image") or "not named",
        "os": (environment.get("os") or {}).get("platform") or platform.platform(),
    }
    return properties


def _escape(text: str, key: bool = False) -> str:
    """Java .properties escaping: backslash, newlines; in keys also '=', ':' and spaces."""
    text = str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if key:
        for char in ("=", ":", " "):
            text = text.replace(char, "\\" + char)
    return text


def render_properties(properties: dict[str, str]) -> str:
    return "".join(f"{_escape(k, key=True)}={_escape(v)}\n" for k, v in properties.items())


def write_environment_properties(
    results_dir: str | Path, *, backend: str | None = None, mode: str | None = None, overwrite: bool = True
) -> Path | None:
    """Write RESULTS/environment.properties; with overwrite=False keep an existing one. Returns the
    path written, or None when an existing file was kept."""
    from harness.records.atomic import atomic_write_text

    path = Path(results_dir) / FILE_NAME
    if path.exists() and not overwrite:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render_properties(environment_properties(backend=backend, mode=mode)))
    return path
