"""Hand-built run directories in the two dump formats, for testing the audit and probes' own logic.

These are inputs built to pass and built to fail (test the tester); the acceptance
against real embedded runs is in test_probes_on_runs.py. Tensors come from a seeded generator: a
random LM head and hidden states, log-probs computed exactly as each side's declared path would.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from harness.records.rundir import RunDir

VOCAB, HIDDEN, PROMPT, RESPONSE = 64, 16, 5, 6


def _lm_head(seed: int):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.5
    return gen, weight


def _log_probs(hidden, weight, targets, temperature=1.0, dtype=torch.float32, top_p=None):
    logits = (hidden.to(dtype) @ weight.to(dtype).T).float() / temperature
    if top_p is not None:
        from harness.operators.sampling_filters import apply_top_k_top_p

        logits, _ = apply_top_k_top_p(logits, None, top_p)
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)


def _sample(hidden, weight, temperature, dtype, top_p, gen) -> torch.Tensor:
    """Sampled response tokens, drawn as the rollout draws them (inside its top-p set)."""
    logits = (hidden.to(dtype) @ weight.to(dtype).T).float() / temperature
    if top_p is not None:
        from harness.operators.sampling_filters import apply_top_k_top_p

        logits, _ = apply_top_k_top_p(logits, None, top_p)
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen).squeeze(1)


def build_run(
    root: Path,
    *,
    steps: int = 2,
    samples: int = 4,
    rollout_dtype=torch.float32,
    top_p: float | None = None,
    temperature: float = 1.0,
    trainer_temperature: float | None = None,
    fault: str | None = None,
    vime_format: bool = False,
    log_metric: bool = True,
    seed: int = 0,
    hidden_noise: float = 0.0,
    bundle_weight_step: float = 0.0,
    weight_digests: bool = True,
) -> Path:
    """A run directory with spec.yaml, metrics.jsonl and dumps; `fault` breaks one thing on purpose.

    `weight_digests`: both sides record a digest of the weights they hold (the embedded trainer's
    consistency_metadata.weights_sha, probe 2's evidence); a stale-weights fault makes the trainer's
    differ from the rollout's from the second step on, as its version label does."""
    run = RunDir(root / f"built-{seed}").create()
    flags = {
        "rollout-temperature": temperature,
        "rollout-top-p": top_p or 1.0,
        "rollout-top-k": -1,
        "vllm-logprobs-mode": "processed_logprobs",
        "hf-checkpoint": "/nonexistent/model",
        "vllm-dtype": str(rollout_dtype).removeprefix("torch."),
        "tensor-model-parallel-size": 1,
    }
    run.write_spec({"run_id": run.id, "flags": flags})
    gen, weight = _lm_head(seed)
    t_temp = temperature if trainer_temperature is None else trainer_temperature
    for step in range(steps):
        rollout_samples, train = (
            [],
            {
                k: []
                for k in (
                    "tokens",
                    "response_lengths",
                    "loss_masks",
                    "log_probs",
                    "rollout_log_probs",
                    "sample_indices",
                    "weight_versions",
                    "consistency_metadata",
                )
            },
        )
        bundle_parts = []
        for index in range(samples):
            hidden = torch.randn(RESPONSE, HIDDEN, generator=gen)
            targets = _sample(hidden, weight, temperature, rollout_dtype, top_p, gen)
            tokens = torch.cat([torch.randint(0, VOCAB, (PROMPT,), generator=gen), targets])
            # hidden_noise: the rollout's hidden states differ from the trainer's (an upstream kernel that
            # diverges while both sides declare the same precision).
            rollout_hidden = hidden + hidden_noise * torch.randn(hidden.shape, generator=gen)
            rollout_lp = _log_probs(rollout_hidden, weight, targets, temperature, rollout_dtype, top_p)
            trainer_lp = _log_probs(hidden, weight, targets, t_temp)
            mask = torch.ones(RESPONSE)
            mask[-1] = 0.0 if index == 0 else 1.0  # one sample with a masked last token
            sample = {
                "tokens": tokens.tolist(),
                "response_length": RESPONSE,
                "loss_mask": mask.tolist(),
                "rollout_log_probs": rollout_lp.tolist(),
                "weight_versions": [str(step)],
                "index": index,
                "reward": 1.0,
            }
            version = str(step - 1 if fault == "stale-weights" and step > 0 else step)
            if not vime_format:
                sample["consistency_metadata"] = {"tokenizer": "tok-A", "sampling": {"temperature": temperature}}
                if weight_digests:
                    sample["consistency_metadata"]["weights_sha"] = f"weights-{step}"
            rollout_samples.append(sample)
            train_tokens = tokens.clone()
            train_mask = mask.clone()
            if fault == "token-shift":
                train_tokens = torch.roll(tokens, -1)
            if fault == "mask-off-by-one":
                train_mask = torch.roll(mask, 1)
            train["consistency_metadata"].append({"weights_sha": f"weights-{version}"} if weight_digests else {})
            train["tokens"].append(train_tokens)
            train["response_lengths"].append(RESPONSE)
            train["loss_masks"].append(train_mask)
            train["log_probs"].append(trainer_lp)
            train["rollout_log_probs"].append(rollout_lp)
            train["sample_indices"].append(index)
            train["weight_versions"].append(version)
            bundle_parts.append((hidden, targets, mask, rollout_lp, trainer_lp))
        if vime_format:
            del train["sample_indices"], train["weight_versions"], train["consistency_metadata"]
        torch.save({"rollout_id": step, "samples": rollout_samples}, run.dumps_dir / f"rollout_{step}.pt")
        torch.save({"rollout_id": step, "rank": 0, "rollout_data": train}, run.dumps_dir / f"train_{step}_0.pt")
        if not vime_format:
            hidden, targets, mask, rlp, tlp = (torch.cat(parts) for parts in zip(*bundle_parts))
            # bundle_weight_step: the bundle's weight taken after an optimizer step (not the weight used)
            stepped = weight + bundle_weight_step * torch.sign(torch.randn(weight.shape, generator=gen))
            torch.save(
                {
                    "rollout_id": step,
                    "hidden": hidden,
                    "weight": stepped,
                    "targets": targets,
                    "loss_mask": mask,
                    "rollout_log_probs": rlp,
                    "trainer_log_probs": tlp,
                    "temperature": temperature,
                    "top_p": top_p or 1.0,
                    "top_k": -1,
                    "rollout_dtype": str(rollout_dtype).removeprefix("torch."),
                    "trainer_dtype": "float32",
                    "logprobs_mode": "processed_logprobs",
                    "weight_version": step,
                },
                run.dumps_dir / f"probe_{step}.pt",
            )
        if log_metric:
            from harness.layout.sample_mean import sample_mean_abs_diff

            value = sample_mean_abs_diff([(a - b).abs() for a, b in zip(train["log_probs"], train["rollout_log_probs"])], train["loss_masks"])
            run.append_record({"kind": "step", "n": step, "metrics": {"train/train_rollout_logprob_abs_diff": value}})
    run.set_status("finished", exit_code=0)
    run.write_argv([])
    run.write_environment({})
    run.close()
    return run.path


def rewrite(path: Path, change) -> None:
    """Load a dump, let `change(data)` edit it, save it back."""
    data = torch.load(path, weights_only=False)
    change(data)
    torch.save(data, path)


__all__ = ["build_run", "rewrite", "json", "yaml"]
