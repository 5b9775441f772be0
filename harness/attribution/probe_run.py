"""What a run declared: its sampling contract, precision policy and TP size, and its tokenizer.

Read from the run's typed spec (`run.spec.flags`: spec.yaml's flags, else its argv's, see
harness/records/recorded_spec.py), so the probes can compare the run's *declared* policy with what its tensors show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunSettings:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs_mode: str = "processed_logprobs"  # what VIME asks vLLM for (docs/embedded.md: --vllm-logprobs-mode)
    rollout_dtype: str = "bfloat16"
    rollout_quantization: str | None = None
    trainer_dtype: str = "float32"  # Megatron trains in fp32 unless --bf16
    tp_size: int = 1
    replay_processed: bool = False
    logprob_operator: str = "native"  # --embedded-logprob-operator: the registry operator both engines ran

    @property
    def filters_on(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def run_settings(run) -> RunSettings:
    """What the run declared, from its typed spec; a flag it does not set takes VIME's default."""
    spec = run.spec
    dtype = str(spec.flag("vllm-dtype", "auto"))
    if dtype == "auto":  # vLLM's auto takes the checkpoint's dtype: the miniature's is fp32, Qwen3's bf16
        dtype = "float32" if str(spec.flag("hf-checkpoint", "")).startswith("embedded://") else "bfloat16"
    return RunSettings(
        temperature=float(spec.flag("rollout-temperature", 1.0)),
        top_p=float(spec.flag("rollout-top-p", 1.0)),
        top_k=int(spec.flag("rollout-top-k", -1)),
        logprobs_mode=str(spec.flag("vllm-logprobs-mode", "processed_logprobs")),
        rollout_dtype={"float": "float32", "half": "float16", "bf16": "bfloat16"}.get(dtype, dtype),
        rollout_quantization=spec.flag("vllm-quantization") or None,
        trainer_dtype="bfloat16" if spec.flag("bf16") else "float32",
        tp_size=int(spec.flag("tensor-model-parallel-size", 1)),
        replay_processed=bool(spec.flag("embedded-replay-processed-logprobs")),
        logprob_operator=str(spec.flag("embedded-logprob-operator", "native") or "native"),
    )


def load_tokenizer(run) -> tuple[object | None, str | None]:
    """The run's tokenizer (tokenizers.Tokenizer), or None and a named warning saying why."""
    checkpoint = run.spec.flag("hf-checkpoint")
    for candidate in _model_dirs(run):
        if candidate and (Path(candidate) / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            try:
                return Tokenizer.from_file(str(Path(candidate) / "tokenizer.json")), None
            except Exception as err:
                return None, f"{candidate}/tokenizer.json: not readable ({type(err).__name__}); tokens shown as ids (code: tokenizer_unavailable)"
    return None, f"no tokenizer.json found for hf-checkpoint {checkpoint!r}; tokens shown as ids (code: tokenizer_unavailable)"


def model_vocab_size(run) -> int | None:
    """The model's (padded) vocabulary size from the checkpoint's config.json, when it is found."""
    import json

    for candidate in _model_dirs(run):
        config = Path(candidate) / "config.json"
        if config.is_file():
            try:
                return int(json.loads(config.read_text())["vocab_size"])
            except (OSError, ValueError, KeyError, TypeError):
                return None
    return None


def _model_dirs(run) -> list:
    checkpoint = run.spec.flag("hf-checkpoint")
    record = run.embedded_record or {}
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    candidates = [value for value in (model.get("path"), record.get("model_dir"), record.get("hf_checkpoint")) if value]
    if isinstance(checkpoint, str) and checkpoint.startswith("embedded://"):
        candidates.append(_embedded_model_dir(checkpoint))
    elif checkpoint:
        candidates.append(checkpoint)
    return [c for c in candidates if c]


def _embedded_model_dir(uri: str) -> Path | None:
    """The cached build of an embedded:// model, without building it (the run built it already)."""
    try:
        from harness.embedded.factory import cache_dir
        from harness.recipes import MODEL_RECIPES, recipe_hash
    except ImportError:
        return None
    name = uri.removeprefix("embedded://").partition("/")[2]
    recipe = MODEL_RECIPES.get(name)
    return None if recipe is None else cache_dir() / "models" / f"{name}-{recipe_hash(recipe)}"
