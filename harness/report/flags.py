"""What a run was, in the summary table's words: precision, operator path, hardware.

Everything is derived from the run's own record (its typed spec's flags, execution decision
records, environment record), never from what a test believes it launched.
"""

from __future__ import annotations

from collections import Counter

from harness.judge.decisions import decision_fields, is_fallback
from harness.spec.flag_read import is_on, text_flag

# vLLM's --dtype spellings (vLLM accepts these aliases) -> the table's words.
_DTYPE_WORDS = {
    "bfloat16": "BF16",
    "bf16": "BF16",
    "float16": "FP16",
    "half": "FP16",
    "fp16": "FP16",
    "float32": "FP32",
    "float": "FP32",
    "fp32": "FP32",
}

# Flag names that select a logprob operator path. RL-Kernel's linear_logp backend and any
# embedded operator flag share these words; the processed-logprob replay is named on its own.
_OPERATOR_FLAG_WORDS = ("operator", "linear-logp", "rl-kernel", "logprob-backend")
PROCESSED_REPLAY_FLAG = "embedded-replay-processed-logprobs"


def describe_precision(flags: dict, checkpoint: dict | None = None, vime: bool = False) -> str:
    """'BF16 train + FP8 rollout' from --bf16/--fp16 (VIME trains in bf16 unless --fp16: `vime`),
    --vllm-quantization, the checkpoint's own config.json where it was read (`checkpoint`:
    harness.records.environment.checkpoint_record), else an FP8 --hf-checkpoint name, and
    --vllm-dtype; without any rollout dtype flag vLLM uses the checkpoint's dtype."""
    if is_on(flags, "fp16"):
        train = "FP16"
    elif is_on(flags, "bf16") or vime:
        train = "BF16"
    else:
        train = "FP32"
    quantization = text_flag(flags, "vllm-quantization")
    path = text_flag(flags, "hf-checkpoint") or ""
    dtype = (text_flag(flags, "vllm-dtype") or "auto").lower()
    read = checkpoint if checkpoint and "source" in checkpoint else None
    if quantization:
        rollout = str(quantization).upper()
    elif read and read.get("quantization"):
        rollout = str(read["quantization"]).upper()
    elif read and dtype == "auto" and str(read.get("dtype", "")).lower() in _DTYPE_WORDS:
        rollout = _DTYPE_WORDS[str(read["dtype"]).lower()]
    elif not read and "fp8" in path.lower():
        rollout = "FP8"
    elif dtype in _DTYPE_WORDS:
        rollout = _DTYPE_WORDS[dtype]
    else:
        rollout = "checkpoint-dtype"
    return f"{train} train + {rollout} rollout"


def describe_execution(decisions: list[dict]) -> str:
    """'ran fused-triton (optimized) x30' or 'FALLBACK to native x3/30: reason' - what actually ran."""
    if not decisions:
        return "no execution decision records"
    ran = Counter(f"{decision_fields(d)[1] or '?'} ({decision_fields(d)[2] or '?'})" for d in decisions)
    text = "ran " + ", ".join(f"{what} x{count}" for what, count in ran.most_common())
    fallbacks = [d for d in decisions if is_fallback(d)]
    if fallbacks:
        reasons = sorted({decision_fields(d)[3] or "no reason given" for d in fallbacks})
        text += f"; FALLBACK {len(fallbacks)}/{len(decisions)}: {'; '.join(reasons)}"
    return text


def describe_operator_path(flags: dict, execution_decisions: list[dict] | None = None) -> str:
    """'default', or the operator flags that changed the path, plus what the execution decision
    records say ran (a requested path that fell back is shown as such)."""
    parts = []
    if is_on(flags, PROCESSED_REPLAY_FLAG):
        parts.append("processed-logprob replay (trainer)")
    for name in sorted(flags):
        if name != PROCESSED_REPLAY_FLAG and any(word in name for word in _OPERATOR_FLAG_WORDS):
            value = flags[name]
            parts.append(name if value is True else f"{name}={value}")
    text = ", ".join(parts) or "default"
    if execution_decisions is not None:
        text += f" [{describe_execution(execution_decisions)}]"
    return text


def describe_hardware(environment: dict | None, ingest: dict | None = None) -> str:
    """'8x NVIDIA GB200, 2 nodes' or 'CPU: <model>, 2 cores (no GPU)' from the environment record."""
    if not environment:
        return "not recorded (ingested run)" if ingest is not None else "not recorded"
    hardware = environment.get("hardware") or {}
    gpus = hardware.get("gpus") or {}
    nodes = (hardware.get("nodes") or {}).get("count")
    where = f", {nodes} nodes" if isinstance(nodes, int) and nodes > 1 else ""
    if gpus.get("count"):
        models = "/".join(gpus.get("models") or ["GPU"])
        return f"{gpus['count']}x {models}{where}"
    cpu = hardware.get("cpu") or {}
    cores = f", {cpu['cores']} cores" if cpu.get("cores") else ""
    return f"CPU: {cpu.get('model') or 'unknown model'}{cores} (no GPU){where}"
