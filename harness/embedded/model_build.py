"""Build a tiny Qwen3 checkpoint from a recipe: tokenizer, config, brief SFT, save (HF format).

Deterministic: fixed seeds, single-threaded torch, data from the recipe's task generator. The
result loads in vLLM and in the Megatron converter like any Qwen3 checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from harness.embedded import task
from harness.recipes import ModelRecipe, recipe_hash


def train_tokenizer(recipe: ModelRecipe) -> Tokenizer:
    pairs = task.operand_pairs(recipe.task, seed_offset=1)
    corpus = []
    for _ in range(2000):
        prompt, response = task.chat_text(*next(pairs))
        corpus.append(prompt + response)
    tok = Tokenizer(models.BPE(unk_token=None))
    # Digits one by one (arithmetic stays learnable), byte-level so decode is exact.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.tokenizer_vocab,
        special_tokens=task.SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


def hf_config(recipe: ModelRecipe, tok: Tokenizer):
    from transformers import Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=recipe.vocab_size,
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position,
        rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
        rms_norm_eps=1e-6,
        tie_word_embeddings=recipe.tie_embeddings,
        bos_token_id=tok.token_to_id(task.PAD_TOKEN),
        eos_token_id=tok.token_to_id(task.EOS_TOKEN),
        pad_token_id=tok.token_to_id(task.PAD_TOKEN),
        torch_dtype="float32",
    )
    if recipe.num_experts:
        return Qwen3MoeConfig(
            **common,
            intermediate_size=recipe.intermediate_size,
            moe_intermediate_size=recipe.moe_intermediate_size,
            num_experts=recipe.num_experts,
            num_experts_per_tok=recipe.experts_top_k,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return Qwen3Config(**common, intermediate_size=recipe.intermediate_size)


def sft_batches(recipe: ModelRecipe, tok: Tokenizer, pad_id: int):
    """Endless (ids, labels) batches; labels are -100 outside the response."""
    pairs = task.operand_pairs(recipe.task, seed_offset=2)
    while True:
        rows = []
        for _ in range(recipe.sft_batch):
            prompt, response = task.chat_text(*next(pairs))
            p_ids, r_ids = tok.encode(prompt).ids, tok.encode(response).ids
            rows.append((p_ids + r_ids, [-100] * len(p_ids) + r_ids))
        width = max(len(ids) for ids, _ in rows)
        ids = torch.tensor([i + [pad_id] * (width - len(i)) for i, _ in rows])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
        yield ids, labels


def save_tokenizer(tok: Tokenizer, out: Path) -> None:
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": task.EOS_TOKEN,
                "pad_token": task.PAD_TOKEN,
                "bos_token": None,
                "model_max_length": 256,
                "chat_template": task.CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )


def build_model(recipe: ModelRecipe, out: Path) -> None:
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(recipe.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.sft_threads)  # part of the recipe (recipes.ModelRecipe.sft_threads)
    tok = train_tokenizer(recipe)
    config = hf_config(recipe, tok)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    pad_id = tok.token_to_id(task.PAD_TOKEN)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=recipe.sft_lr, total_steps=recipe.sft_steps)
    batches = sft_batches(recipe, tok, pad_id)
    columns = (
        TextColumn(f"building embedded://model/{recipe.name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} SFT steps, loss {task.fields[loss]:.3f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        bar = progress.add_task("sft", total=recipe.sft_steps, loss=float("nan"))
        for _ in range(recipe.sft_steps):
            ids, labels = next(batches)
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            progress.update(bar, advance=1, loss=loss.item())
    torch.set_num_threads(threads)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=pad_id).save_pretrained(out)
    save_tokenizer(tok, out)
    (out / "lab_recipe.json").write_text(json.dumps({"recipe": asdict(recipe), "hash": recipe_hash(recipe), "final_sft_loss": loss.item()}, indent=1))
