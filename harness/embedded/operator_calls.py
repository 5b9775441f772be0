"""Proof that the selected-log-prob operator ran: its calls and tokens, counted where it runs.

The flags say which operator each engine was asked to run; only a count taken inside the call
says it ran. Every call that computes sampled tokens' log-probs adds (1 call, N tokens) under
(side, pass, operator):

- ``trainer``: ``recompute`` (the no-grad old-log-prob pass) and ``training`` (the training
  forward), counted in ``policy.Policy.forward_micro`` after the operator returned: the registry
  operator's name, ``true-on-policy``, ``processed-replay`` or ``native`` (Megatron's
  vocab-parallel cross entropy);
- ``rollout``: ``sampler`` (the sampled tokens' log-probs vLLM returns), counted inside vLLM's
  sampler (``logprob_operator.install_in_vllm``) in whichever process runs the engine: the
  trainer's (colocate), the engine-core child (TP=2), the non-colocate server's; ``engine-norm``:
  the true-on-policy engine's registered fused add + RMSNorm (``embedded_rounded_residual``); and
  ``capture``: the boundary capture's prefills (not the rollout's tokens, kept apart).

The counts live in the process that ran the call; the engine's are read back through the worker
extension (``WORKER_METHOD``, vLLM's collective_rpc / the server's /collective_rpc) and the trainer
writes both sides to ``operator_calls.json`` in the run directory after every rollout
(harness/records/operator_calls.py reads it; harness/judge/candidate_execution.py judges it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = "operator_calls.json"
FORMAT = "vime-mismatch-lab/operator-calls-v1"
WORKER_METHOD = "embedded_operator_calls"  # worker_extension.EmbeddedWorkerExtension

TRAINER, ROLLOUT = "trainer", "rollout"
RECOMPUTE, TRAINING, SAMPLER, ENGINE_NORM, CAPTURE = "recompute", "training", "sampler", "engine-norm", "capture"

_counts: dict[tuple[str, str, str], list[int]] = {}
_capturing = False  # the boundary capture's prefill runs through the same sampler: counted apart


def count(side: str, pass_: str, operator: str, tokens: int) -> None:
    """One call of ``operator`` that computed ``tokens`` rows, in this process."""
    if side == ROLLOUT and _capturing and pass_ == SAMPLER:
        pass_ = CAPTURE
    entry = _counts.setdefault((side, pass_, operator), [0, 0])
    entry[0] += 1
    entry[1] += int(tokens)


def capturing(on: bool) -> None:
    """Between the capture's start and take (worker_extension.py): sampler calls are the capture's."""
    global _capturing
    _capturing = bool(on)


def snapshot(side: str) -> dict:
    """{"process": pid, "passes": {pass: {operator: {"calls", "tokens"}}}} of one side, in this process."""
    passes: dict = {}
    for (s, pass_, operator), (calls, tokens) in sorted(_counts.items()):
        if s == side:
            passes.setdefault(pass_, {})[operator] = {"calls": calls, "tokens": tokens}
    return {"process": os.getpid(), "passes": passes}


def write(directory: str | None, record: dict) -> Path | None:
    """operator_calls.json, atomically (a run that dies keeps the counts of its last rollout)."""
    if not directory:
        return None
    path = Path(directory) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(path)
    return path
