"""Paired per-token deltas: a rung and its parent score the SAME recorded tokens.

A rung's trajectory delta compares two runs that sampled different tokens on different policy
paths. For a rung that leaves the sampled-token contract alone (a precision rung, the fp32
floor's child, an operator candidate), both configurations can instead score one fixed set of
tokens: the parent's recorded rollouts. Each configuration scores every response token on both of
its sides (vLLM's prompt log-probs on the rollout side, Megatron's recompute on the trainer side,
harness.embedded.paired_score), at the initial weights every rung starts from, so per token

    d = |logp_vllm - logp_megatron|_child - |logp_vllm - logp_megatron|_parent

is a paired difference: sampling noise and the policy's path cancel, only the configurations'
arithmetic is left. The estimate is VIME's sample mean (per sequence the mean of d over its
response tokens, then the mean over sequences), the interval a cluster bootstrap over sequences
(the tokens of one sequence are not independent) read as estimate +/- t(n - 1) x SE, the shape
of harness.judge.stats, so harness.judge.outcome judges it like any other difference.

This module is the numbers: which pairs can be scored on shared tokens (`not_checked_reason`), and
the paired delta from two configurations' scores (`compare`). The scores themselves come from the
scorer process, run by harness.experiment.paired_scores (`paired_delta(child_run, parent_run,
knobs)`, the one entry point: it answers NotChecked, with the reason, when the pairing would not be
paired, off the embedded backend, or when scoring fails; scores are cached in each run's paired/).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge.effects import ladder_question, question_effect
from harness.judge.stats import DiffCI
from harness.records.runload import Run
from harness.spec import Knobs, backends

__all__ = [
    "PairedDelta",
    "NotChecked",
    "cluster_bootstrap_diff",
    "compare",
    "not_checked_reason",
    "MEASURED_AT",
]

MEASURED_AT = "measured at the initial weights on the parent's recorded tokens"
TRAINER_MODULE = "harness.embedded.train"  # named, not imported: the recorded command's module
# Flags outside the sampled-token contract that a paired rung may still differ in: which side
# replays the processed contract (the identity under T=1, no filters), and the linear operator both
# engines run (the candidate at the fp8-weights boundary, knobs/candidate.yaml).
_OPERATOR_FLAGS = ("embedded-replay-processed-logprobs", "embedded-linear-operator")


@dataclass(frozen=True)
class NotChecked:
    """No paired delta for this rung, and why (never a pass)."""

    reason: str

    def summary(self) -> str:
        return f"paired per-token delta not checked: {self.reason}"


@dataclass(frozen=True)
class PairedDelta:
    """The paired delta of a rung against its parent on the parent's recorded tokens."""

    child: str  # run ids
    parent: str
    diff: DiffCI  # child - parent; block_len_a/b = 1: the resampled unit is one sequence
    child_mean: float  # VIME-style mean |logp_vllm - logp_megatron| of each configuration on these tokens
    parent_mean: float
    sequences: int
    tokens: int
    rollouts: list[int]  # the parent's rollout ids whose samples were scored
    outcome: outcomes.Outcome  # at the knobs' confidence, against the effect of interest on these means
    # How well the scorer reproduces the parent's own record: max |scored - recorded| over rollout 0
    # (generated at the initial weights), per side; None when rollout 0 was not scored at version 0.
    replay_check: dict | None = None
    measured_at: str = MEASURED_AT

    def summary(self) -> str:
        d = self.diff
        return (
            f"paired per-token delta {d.diff:+.4g} [{d.low:+.4g}, {d.high:+.4g}] at {d.confidence:.0%} "
            f"(parent {self.parent_mean:.4g} -> child {self.child_mean:.4g}; {self.sequences} sequences, {self.tokens} tokens, "
            f"cluster bootstrap over sequences); {self.outcome.direction}; {self.measured_at}"
        )

    def as_dict(self) -> dict:
        d = self.diff
        return {
            "child": self.child,
            "parent": self.parent,
            "delta": d.diff,
            "low": d.low,
            "high": d.high,
            "confidence": d.confidence,
            "se": d.se,
            "df": d.df,
            "excludes_zero": d.excludes_zero,
            "child_mean": self.child_mean,
            "parent_mean": self.parent_mean,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "rollouts": self.rollouts,
            "outcome": self.outcome.direction,
            "effect_of_interest": self.outcome.effect,
            "replay_check": self.replay_check,
            "measured_at": self.measured_at,
        }


# ------------------------------------------------------------------ the interval
def cluster_bootstrap_diff(
    per_sequence: Sequence[Sequence[float]],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> DiffCI:
    """Mean over sequences of each sequence's mean paired difference, with a cluster bootstrap.

    Whole sequences are resampled (a sequence's tokens share a prefix and a position, so they are
    not independent draws); the interval is estimate +/- t(n - 1) x the bootstrap SE, as
    harness.judge.stats builds its intervals, so its p-values are exact for harness.judge.outcome.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: expected a probability in (0, 1)")
    means = []
    for i, values in enumerate(per_sequence):
        array = np.asarray(values, dtype=float).reshape(-1)
        if len(array) == 0:
            raise ValueError(f"sequence {i} has no tokens: a paired delta needs at least one scored token per sequence")
        bad = np.flatnonzero(~np.isfinite(array))
        if len(bad):
            raise ValueError(f"sequence {i}, token {bad[0]}: {array[bad[0]]} is not a finite difference")
        means.append(array.mean())
    means = np.asarray(means)
    if len(means) < 2:
        raise ValueError(f"{len(means)} sequence(s): a cluster bootstrap needs at least 2")
    estimate = float(means.mean())
    rng = np.random.default_rng(seed)
    resampled = means[rng.integers(0, len(means), size=(n_resamples, len(means)))].mean(axis=1)
    return DiffCI.around(estimate, float(np.std(resampled, ddof=1)), float(len(means) - 1), confidence)


# ------------------------------------------------------------------ eligibility
def _identity_contract(run: Run) -> bool:
    f = run.spec
    return float(f.flag("rollout-temperature", 1.0)) == 1.0 and float(f.flag("rollout-top-p", 1.0)) >= 1.0 and int(f.flag("rollout-top-k", -1)) <= 0


def trainer_flags(run: Run) -> list[str] | None:
    """The embedded trainer's VIME flags from the run's recorded command."""
    argv = [str(t) for t in (run.argv or [])]
    return argv[argv.index(TRAINER_MODULE) + 1 :] if TRAINER_MODULE in argv else None


def not_checked_reason(child: Run, parent: Run, knobs: Knobs) -> str | None:
    """Why this pair cannot be scored on shared tokens, or None when it can."""
    for role, run in (("child", child), ("parent", parent)):
        if not getattr(backends.of_run(run.spec.backend), "trainer_in_repo", False):
            return f"the {role} run {run.id} ran on backend {run.spec.backend!r}; only this repository's trainer can be rebuilt and scored here"
        if trainer_flags(run) is None:
            return f"the {role} run {run.id} records no embedded trainer command (argv.json)"
        if not _identity_contract(run):
            return (
                f"the {role} run {run.id} samples with temperature/top-p/top-k: vLLM's prompt log-probs are raw log-probs, "
                "not the rollout's processed ones, so its rollout side cannot be re-scored"
            )
        if int(run.spec.flag("tensor-model-parallel-size", 1)) != 1:
            return f"the {role} run {run.id} uses TP > 1; the scorer builds one TP rank"
        if run.spec.flag("embedded-inject"):
            return f"the {role} run {run.id} injects a fault ({run.spec.flag('embedded-inject')}); faults act during training, not at the initial weights"
    allowed = set(knobs.classification.precision_flags.flags) | set(_OPERATOR_FLAGS)
    a, b = child.spec.flags, parent.spec.flags
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    other = [k for k in changed if k not in allowed]
    if other:
        return f"the rung changes {other}: not only precision or operator flags, so the two configurations do not score the same contract"
    if not any(p.startswith("rollout_") for p in parent.dumps):
        return f"the parent run {parent.id} has no rollout dumps (dumps/rollout_N.pt) to take the tokens from"
    return None


def _abs_gaps(scored: dict) -> list[np.ndarray]:
    return [np.abs(np.asarray(v) - np.asarray(m)) for v, m in zip(scored["rollout"], scored["trainer"])]


def _replay_check(parent_scores: dict, recorded: list[dict]) -> dict | None:
    """How closely the parent's configuration, re-built, reproduces its own rollout 0 (sampled at
    the initial weights): a scorer that scored the wrong positions would be far off here."""
    rows = [i for i, r in enumerate(recorded) if r["rollout"] == 0 and r["weight_version"] == 0]
    if not rows:
        return None
    gaps = [np.abs(np.asarray(parent_scores["rollout"][i]) - np.asarray(recorded[i]["log_probs"])) for i in rows]
    return {"sequences": len(rows), "rollout_side_max_abs": float(max(g.max() for g in gaps))}


def compare(
    child_scores: dict,
    parent_scores: dict,
    knobs: Knobs,
    *,
    child_id: str,
    parent_id: str,
    rollouts: list[int],
    recorded: list[dict],
    rung: str | None = None,
) -> PairedDelta:
    """The paired delta from two configurations' scores of the same sequences."""
    parent_gaps, child_gaps = _abs_gaps(parent_scores), _abs_gaps(child_scores)
    if [len(g) for g in parent_gaps] != [len(g) for g in child_gaps]:
        raise ValueError(f"{child_id} and {parent_id} scored different token sets: the delta would not be paired")
    confidence = knobs.threshold("bootstrap_confidence")
    diff = cluster_bootstrap_diff([c - p for c, p in zip(child_gaps, parent_gaps)], confidence=confidence)
    parent_mean = float(np.mean([g.mean() for g in parent_gaps]))
    # The rung's own effect of interest (knobs/effects.yaml); the absolute floor where the rung has none.
    questions = knobs.effects.questions if knobs.effects is not None else {}
    if rung is not None and ladder_question(rung) in questions:
        effect = question_effect(knobs, ladder_question(rung), parent_mean).value
    else:
        effect = float(knobs.threshold("rung_min_abs_delta"))
    return PairedDelta(
        child=child_id,
        parent=parent_id,
        diff=diff,
        child_mean=float(np.mean([g.mean() for g in child_gaps])),
        parent_mean=parent_mean,
        sequences=len(parent_gaps),
        tokens=int(sum(len(g) for g in parent_gaps)),
        rollouts=rollouts,
        outcome=outcomes.judge_outcome(diff, effect, confidence),
        replay_check=_replay_check(parent_scores, recorded),
    )
