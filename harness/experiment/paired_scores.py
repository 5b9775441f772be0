"""The paired per-token delta's scores: each configuration scores the parent's recorded tokens.

The numbers (which pairs qualify, the interval) are harness.judge.paired's; this module gathers its
evidence: the parent's recorded tokens from its rollout dumps, and each configuration's scores of
them from the scorer process (harness.embedded.paired_score, forked from the session's pre-imported
interpreter by harness.launch.warm), cached in each run's directory (paired/), keyed by the scored
tokens' hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.judge.paired import NotChecked, PairedDelta, compare, not_checked_reason, trainer_flags
from harness.records.atomic import atomic_write_json
from harness.records.runload import Run
from harness.spec import Knobs

CACHE_DIR = "paired"
SCORER_MODULE = "harness.embedded.paired_score"
SCORER_TIMEOUT_S = 900  # one engine start and one prefill of a few hundred tokens; 30 s measured on 2 cores


def _rollout_ids(parent: Run) -> list[int]:
    ids = []
    for name in parent.dumps:
        stem = Path(name).stem
        if stem.startswith("rollout_") and stem[len("rollout_") :].isdigit():
            ids.append(int(stem[len("rollout_") :]))
    return sorted(ids)


def parent_tokens(parent: Run, rollouts: int) -> tuple[list[dict], list[int], list[dict]]:
    """The first `rollouts` rollout dumps' samples: sequences to score, the rollout ids, and per
    sample what the parent recorded (its rollout log-probs and weight version)."""
    import torch

    sequences, used, recorded = [], [], []
    for rollout_id in _rollout_ids(parent)[:rollouts]:
        dump = torch.load(parent.path / "dumps" / f"rollout_{rollout_id}.pt", weights_only=False)
        used.append(rollout_id)
        for s in dump["samples"]:
            p, r = len(s["prompt_ids"]), int(s["response_length"])
            sequences.append({"tokens": [int(t) for t in s["tokens"]], "prompt_len": p, "response_len": r})
            recorded.append({"rollout": rollout_id, "log_probs": list(s["rollout_log_probs"]), "weight_version": int(s["weight_versions"][0])})
    return sequences, used, recorded


def _tokens_hash(sequences: list[dict]) -> str:
    return hashlib.sha256(json.dumps(sequences, sort_keys=True).encode()).hexdigest()[:12]


def scores(run: Run, sequences: list[dict], source_id: str, cache_dir: Path | None = None) -> dict:
    """`run`'s configuration's scores of `sequences` (both sides), from the cache (default: the
    run's own paired/ directory) or from the scorer, which then fills the cache."""
    from filelock import FileLock

    key = _tokens_hash(sequences)
    directory = cache_dir or run.path / CACHE_DIR
    cache = directory / f"scores-on-{source_id}-{key}.json"
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache) + ".lock"):
        if cache.is_file():
            return json.loads(cache.read_text())
        tokens_file = directory / f"tokens-{source_id}-{key}.json"
        atomic_write_json(tokens_file, {"source": source_id, "sequences": sequences})
        out = cache.with_name(cache.name + ".scoring")
        cmd = [sys.executable, "-m", SCORER_MODULE, "--sequences", str(tokens_file), "--out", str(out), "--", *trainer_flags(run)]
        code, output = _run_scorer(cmd)
        tokens_file.unlink(missing_ok=True)
        if code != 0 or not out.is_file():
            lines = [ln for ln in (output or "").splitlines() if ln.strip()]
            raise RuntimeError(f"scoring {run.id} exited {code}: {lines[-1][-300:] if lines else 'no output'}")
        result = json.loads(out.read_text())
        result.update(source=source_id, tokens_hash=key)
        atomic_write_json(cache, result)
        out.unlink(missing_ok=True)
        return result


def _run_scorer(cmd: list[str]) -> tuple[int, str]:
    """The scorer forked from the session's pre-imported interpreter (harness.launch.warm: the ~10 s
    of imports the trainer runs already paid), or started cold when none can start."""
    from harness.launch.warm import WarmStartUnavailable, run_to_end

    repo = Path(__file__).resolve().parents[2]
    try:
        return run_to_end(cmd, repo, dict(os.environ), SCORER_TIMEOUT_S)
    except WarmStartUnavailable:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=SCORER_TIMEOUT_S, cwd=repo)
        return done.returncode, done.stderr


def paired_delta(child_run: Run, parent_run: Run, knobs: Knobs) -> PairedDelta | NotChecked:
    """The rung's paired per-token delta against its parent, or why it is not checked. The first
    call scores (one scorer process per configuration, ~30 s each on 2 cores); later calls read
    each run's paired/ cache."""
    reason = not_checked_reason(child_run, parent_run, knobs)
    if reason is not None:
        return NotChecked(reason)
    sequences, rollouts, recorded = parent_tokens(parent_run, int(knobs.threshold("paired_score_rollouts")))
    try:
        parent_scores = scores(parent_run, sequences, parent_run.id)
        child_scores = scores(child_run, sequences, parent_run.id)
        return compare(
            child_scores,
            parent_scores,
            knobs,
            child_id=child_run.id,
            parent_id=parent_run.id,
            rollouts=rollouts,
            recorded=recorded,
            rung=child_run.spec.rung,
        )
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        return NotChecked(f"scoring failed: {str(exc).splitlines()[0]}")
