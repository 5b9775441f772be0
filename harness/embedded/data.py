"""Prompt data in dapo-math-17k form, tokenised exactly once, the way VIME reads it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness.embedded.engine import MAX_MODEL_LEN


class DataError(ValueError):
    """Bad prompt data: the message is the one line the user sees."""


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    label: str


def tokenizer_hash(model_dir: Path) -> str:
    path = model_dir / "tokenizer.json"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "unknown"


def load_prompts(path: Path, tokenizer, *, input_key: str, label_key: str | None, chat_template: bool, max_response_len: int) -> list[Prompt]:
    if not path.is_file():
        raise DataError(f"--prompt-data {path}: no such file (expected JSONL in dapo-math form)")
    prompts = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not JSON ({exc.msg}); read {len(prompts)} prompts before it") from None
            if input_key not in row:
                raise DataError(f"{path}:{lineno}: no key {input_key!r} (--input-key); keys: {sorted(row)}")
            if label_key and label_key not in row:
                raise DataError(f"{path}:{lineno}: no key {label_key!r} (--label-key); keys: {sorted(row)}")
            prompt = row[input_key]
            if chat_template:
                if isinstance(prompt, str):
                    prompt = [{"role": "user", "content": prompt}]
                text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            elif isinstance(prompt, str):
                text = prompt
            else:
                raise DataError(f"{path}:{lineno}: {input_key!r} holds chat messages; pass --apply-chat-template")
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) + max_response_len > MAX_MODEL_LEN:
                raise DataError(
                    f"{path}:{lineno}: prompt of {len(ids)} tokens + --rollout-max-response-len "
                    f"{max_response_len} exceeds the context of {MAX_MODEL_LEN} tokens"
                )
            prompts.append(Prompt(ids, str(row.get(label_key, "")) if label_key else ""))
    if not prompts:
        raise DataError(f"--prompt-data {path}: no prompts in the file")
    return prompts
