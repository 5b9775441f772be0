"""``python -m harness.embedded.paired_score --sequences IN.json --out OUT.json -- <VIME flags>``:
score fixed token sequences on both sides of one configuration, at the initial weights.

The configuration is a run's own flags (the trainer's argv). The parts are built exactly as the
trainer builds them (``EmbeddedRun.build``: the checkpoint, the Megatron policy in the run's
dtype, the vLLM engine in its dtype, fp8-rounded weights when the run quantises), then each
sequence's response tokens are scored twice without sampling anything:

- rollout side: vLLM's prompt log-probs of the given token ids (one prefill per sequence);
- trainer side: the Megatron policy's no-grad log-prob pass, packed in micro-batches as the
  trainer's recompute packs them.

vLLM computes prompt log-probs from raw logits (no temperature, no top-k/top-p), so they equal the
rollout's log-probs only under the identity sampling contract (T=1, top_p=1, top-k off); the
caller (harness.judge.paired) scores only such configurations. One configuration per process:
vLLM and Megatron's parallel state are process-global.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from harness.embedded import flags as flag_table  # noqa: E402
from harness.embedded import fp8, threads, vllm_cpu_fixes  # noqa: E402

fp8.install_from_env()
vllm_cpu_fixes.install_from_env()

USAGE = "usage: python -m harness.embedded.paired_score --sequences IN.json --out OUT.json -- <VIME flags>"


class ScoreInputError(ValueError):
    """Bad scorer input: the message is the one line the user sees."""


def read_sequences(path: Path) -> list[dict]:
    """[{tokens, prompt_len, response_len}] from the caller's JSON file, checked."""
    try:
        rows = json.loads(path.read_text())["sequences"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScoreInputError(f"{path}: expected JSON {{'sequences': [...]}} ({exc})") from None
    for i, row in enumerate(rows):
        tokens, p, r = row.get("tokens"), row.get("prompt_len"), row.get("response_len")
        if not (isinstance(tokens, list) and isinstance(p, int) and isinstance(r, int) and p >= 1 and r >= 1 and p + r == len(tokens)):
            raise ScoreInputError(f"{path}: sequences[{i}]: expected tokens (list) with prompt_len >= 1 + response_len >= 1 == len(tokens)")
    return rows


def scoring_settings(settings):
    """The run's configuration, built the way its numerics are: one in-process engine (the
    non-colocate server runs the same vLLM model code), one TP rank, no dumps, no probes."""
    if settings.tp != 1:
        raise ScoreInputError(f"--tensor-model-parallel-size {settings.tp}: the paired scorer builds one TP rank only")
    if getattr(settings, "routing_replay", False):
        raise ScoreInputError("--use-rollout-routing-replay: re-scored tokens carry no rollout routing to replay")
    return replace(settings, colocate=True, output_dir=None, save_rollout=None, save_train=None, probe_samples=0)


def rollout_side(engine, sequences: list[dict]) -> list[list[float]]:
    """vLLM's log-prob of each response token given its prefix (prompt log-probs, raw logits)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    # prompt_logprobs=0: only the given token's log-prob. max_tokens=1: the one sampled token is
    # discarded. Requests with prompt log-probs skip the prefix cache (vLLM's default for them).
    params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
    outs = engine.llm.generate([TokensPrompt(prompt_token_ids=s["tokens"]) for s in sequences], params, use_tqdm=False)
    scored = []
    for seq, out in zip(sequences, outs):
        p, tokens = seq["prompt_len"], seq["tokens"]
        # prompt_logprobs[i] scores tokens[i] given tokens[:i]; entry 0 is None.
        scored.append([out.prompt_logprobs[i][tokens[i]].logprob for i in range(p, len(tokens))])
    return scored


def trainer_side(run, sequences: list[dict]) -> list[list[float]]:
    """The Megatron policy's no-grad log-probs of the response tokens, micro-batched as the
    trainer's recompute does (its packing, its LogprobSpec)."""
    from harness.embedded.policy import LogprobSpec, micro_batches

    s = run.s
    spec = LogprobSpec(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, replay=s.replay_processed)
    scored: list[list[float] | None] = [None] * len(sequences)
    for idx in micro_batches([len(x["tokens"]) + 1 for x in sequences], s.max_tokens_per_micro_batch):
        seqs = [(sequences[i]["tokens"], sequences[i]["prompt_len"], sequences[i]["response_len"]) for i in idx]
        values, _ = run.policy.forward_micro(seqs, spec, grad=False)
        for i, v in zip(idx, values):
            scored[i] = v.float().tolist()
    return scored


def score(argv: list[str], sequences: list[dict]) -> dict:
    """Both sides' log-probs of every sequence's response tokens for the configuration `argv`."""
    from harness.embedded.loop import EmbeddedRun
    from harness.embedded.settings import from_flags

    values, _ = flag_table.parse(argv)
    settings = scoring_settings(from_flags(values))
    run = EmbeddedRun(settings, tp_rank=0)
    t0 = time.perf_counter()
    try:
        run.build(os.path.join(tempfile.mkdtemp(prefix="paired-store-"), "store"))
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        rollout = rollout_side(run.engine, sequences)
        trainer = trainer_side(run, sequences)
        score_s = time.perf_counter() - t0
    finally:
        run.close()
    return {
        "weights": "initial (the run's --hf-checkpoint, weight version 0)",
        "train_dtype": "bfloat16" if settings.bf16 else "float32",
        "rollout_dtype": settings.vllm_dtype,
        "rollout_quantization": "fp8-e4m3-emulated" if settings.fp8 else None,
        "rollout": rollout,
        "trainer": trainer,
        "build_seconds": build_s,
        "score_seconds": score_s,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[0] != "--sequences" or argv[2] != "--out" or argv[4] != "--":
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    sequences_path, out_path = Path(argv[1]), Path(argv[3])
    threads.pin()  # the same arithmetic whatever else runs (harness.embedded.threads)
    try:
        sequences = read_sequences(sequences_path)
        result = score(argv[5:], sequences)
    except (ScoreInputError, flag_table.FlagError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_path)  # atomic: a killed scorer leaves no half-written cache entry
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
