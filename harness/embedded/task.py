"""The synthetic math task, written the way dapo-math-17k is written.

Each prompt line is ``{"prompt": [{"role": "user", "content": ...}], "label": "68"}``; the
reference answer the SFT teaches is a short reasoning inside ``<think>...</think>`` followed by
``\\boxed{answer}``, which VIME's deepscaler reward reads.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from harness.recipes import TaskRecipe

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
# Qwen-style ChatML; the generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def question(a: int, b: int) -> str:
    return f"Compute {a} + {b}. Answer: \\boxed{{$Answer}}"


def reference_response(a: int, b: int) -> str:
    return f"<think>\n{a}+{b}={a + b}\n</think>\n\n\\boxed{{{a + b}}}"


def operand_pairs(task: TaskRecipe, seed_offset: int) -> Iterator[tuple[int, int]]:
    rng = random.Random(task.seed + seed_offset)
    while True:
        yield rng.randint(0, task.operand_max), rng.randint(0, task.operand_max)


def prompt_rows(task: TaskRecipe) -> list[dict]:
    pairs = operand_pairs(task, seed_offset=0)
    rows = []
    for _ in range(task.num_prompts):
        a, b = next(pairs)
        rows.append({"prompt": [{"role": "user", "content": question(a, b)}], "label": str(a + b)})
    return rows


def chat_text(a: int, b: int) -> tuple[str, str]:
    """(prompt text with the generation prompt, response text ending in EOS) for SFT."""
    prompt = f"<|im_start|>user\n{question(a, b)}<|im_end|>\n<|im_start|>assistant\n"
    return prompt, reference_response(a, b) + EOS_TOKEN
