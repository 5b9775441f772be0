"""The candidate operator's A/B (knobs/candidate.yaml): each pair's runs gathered, judged by the gate, held
to its pre-registered answer; the negative control in the same gate; the seed's A/B question 4.

Evidence first (the runs of each side at every replicate seed, through the fetcher the caller holds:
pytest's, the Session's or a tool's), then the gate's public functions (harness.judge.ab: the
same-workload contract, drift reduced, reward preserved; harness.judge.candidate_gate: what kind of
change the candidate is; harness.judge.ab_performance: the performance half), then the findings
against knobs/candidate.yaml's expectations. A pair whose contract fails is not judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.experiment.evidence import contract_problems, fetch_many, replicate_sets
from harness.experiment.paired_scores import paired_delta
from harness.judge import ab
from harness.judge.ab_performance import performance_half
from harness.judge.candidate_gate import MixedPathsAnswer, candidate_kind, gate_label, mixed_paths
from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.backends import backend as backend_of
from harness.spec.candidate_file import REPORTED

NEGATIVE_CONTROL = "negative-control"


@dataclass
class PairAnswer:
    """One pair judged: its contract, the kind of change, the drift and reward answers, the performance half."""

    name: str
    rung: str
    stage: str
    baseline: list[Run]
    candidate: list[Run]
    contract: list[str]
    kind: dict
    label: str = ""
    drift: ab.Answer | None = None
    reward: ab.Answer | None = None
    performance: list = field(default_factory=list)
    # The same tokens scored by both configurations (harness.judge.paired, the judging seed's pair):
    # PairedDelta, or NotChecked with the reason (a filter rung's rollout side cannot be re-scored).
    paired: object = None
    findings: list[str] = field(default_factory=list)  # what differs from knobs/candidate.yaml's expectation

    @property
    def outcome(self) -> str | None:
        return (self.drift.evidence or {}).get("outcome") if self.drift else None

    @property
    def paired_outcome(self) -> str | None:
        return self.paired.outcome.direction if hasattr(self.paired, "outcome") else None

    def paired_data(self) -> dict | None:
        if self.paired is None:
            return None
        return self.paired.as_dict() if hasattr(self.paired, "as_dict") else {"not_checked": self.paired.reason}

    def as_dict(self) -> dict:
        return {
            "pair": self.name,
            "rung": self.rung,
            "stage": self.stage,
            "baseline_runs": [r.id for r in self.baseline],
            "candidate_runs": [r.id for r in self.candidate],
            "seeds": [r.spec.flag("seed") for r in self.baseline],
            "contract": self.contract,
            "kind": self.kind,
            "gate_label": self.label,
            "drift": None if self.drift is None else {"message": self.drift.message, **self.drift.evidence},
            "reward": None if self.reward is None else {"message": self.reward.message, **self.reward.evidence},
            "performance": [row.as_dict() for row in self.performance],
            "paired": self.paired_data(),
            "findings": self.findings,
        }


def pair_flags(knobs: Knobs, name: str) -> tuple[str, str, dict]:
    """(rung, stage, the candidate side's flags) of a pair name, or of the negative control."""
    chosen = knobs.candidate
    if name == NEGATIVE_CONTROL:
        control = chosen.negative_control
        return control.rung, control.stage, dict(control.set)
    pair = chosen.pairs[name]
    return pair.rung, pair.stage, {chosen.flag: chosen.operator}


def replicates(knobs: Knobs, backend: str) -> int:
    chosen = knobs.candidate.replicates
    return getattr(chosen, backend_of(backend).replicate_section)


def gather(knobs: Knobs, name: str, fetcher: Callable[[str], Callable[..., Run]], count: int, seeds: list[int] | None = None):
    """(baseline runs, candidate runs) of a pair at `count` replicate seeds from the stage seed on, or at
    `seeds` (the design's). `fetcher(stage)` is the caller's run source at that stage."""
    rung, stage, flags = pair_flags(knobs, name)
    fetch = fetcher(stage)
    if seeds is None:
        baseline, candidate = replicate_sets([rung, (rung, flags)], fetch, count)
        return baseline, candidate
    runs = fetch_many(fetch, [(rung, {"seed": s}) for s in seeds] + [(rung, {**flags, "seed": s}) for s in seeds])
    return runs[: len(seeds)], runs[len(seeds) :]


def judge_pair(name: str, knobs: Knobs, baseline: list[Run], candidate: list[Run], backend: str) -> PairAnswer:
    """The gate on one pair (the negative control included), held to its pre-registered answer."""
    rung, stage, _ = pair_flags(knobs, name)
    kind = candidate_kind(baseline[0].spec.flags, candidate[0].spec.flags, knobs)
    answer = PairAnswer(name, rung, stage, baseline, candidate, contract_problems(baseline[0], candidate[0], knobs), kind.as_dict())
    if answer.contract:
        answer.label = gate_label(kind, None)
        answer.findings = [f"not judged: the A/B is rejected ({answer.contract[0]})"]
        return answer
    answer.drift = ab.drift_reduced(baseline, candidate, knobs)
    answer.reward = ab.reward_preserved(baseline, candidate, knobs)
    answer.performance = performance_half(baseline, candidate, knobs)
    answer.paired = paired_delta(candidate[0], baseline[0], knobs)
    answer.label = gate_label(kind, answer.outcome)
    answer.findings = _findings(name, answer, knobs, backend)
    return answer


def expectation(knobs: Knobs, name: str, backend: str):
    chosen = knobs.candidate
    expect = chosen.negative_control.expect if name == NEGATIVE_CONTROL else chosen.pairs[name].expect
    return expect.get(backend)


def _findings(name: str, answer: PairAnswer, knobs: Knobs, backend: str) -> list[str]:
    expected = expectation(knobs, name, backend)
    if expected is None:
        return []
    findings = []
    if expected.drift != REPORTED and answer.outcome != expected.drift:
        findings.append(f"drift: expected {expected.drift} (knobs/candidate.yaml: {expected.design}), got {answer.drift.message}")
    if expected.paired_drift != REPORTED and answer.paired_outcome != expected.paired_drift:
        got = answer.paired.summary() if answer.paired is not None else "not measured"
        findings.append(f"paired drift on the same tokens: expected {expected.paired_drift} (knobs/candidate.yaml: {expected.design}), got {got}")
    if expected.reward_preserved != REPORTED and answer.reward.passed != expected.reward_preserved:
        findings.append(f"reward preserved: expected {expected.reward_preserved}, got {answer.reward.message}")
    return findings


def judge_mixed_paths(knobs: Knobs, answers: dict[str, PairAnswer], backend: str) -> tuple[MixedPathsAnswer, list[str]]:
    """The seed's A/B question 4 from the bf16 and fp8 pairs' drift answers, and what differs from its expectation."""
    chosen = knobs.candidate.mixed_paths
    bf16, fp8 = answers[chosen.bf16], answers[chosen.fp8]
    answer = mixed_paths(*(_mixed_evidence(pair) for pair in (bf16, fp8)))
    expected = chosen.expect.get(backend)
    findings = []
    if expected not in (None, REPORTED) and answer.answer != expected:
        findings.append(f"BF16/FP8 mixed paths: expected {expected} (knobs/candidate.yaml mixed_paths: {chosen.design}), got {answer.message}")
    return answer, findings


def _mixed_evidence(pair: PairAnswer) -> dict:
    """A pair's drift evidence for question 4: the paired per-token delta on the same tokens where it was
    measured (fixed semantics, the sampling noise cancelled), else the A/B's drift answer over the pairs."""
    if pair.paired_outcome is not None:
        data = pair.paired_data()
        return {
            "outcome": data["outcome"],
            "ci": [data["low"], data["high"]],
            "effect_of_interest": data["effect_of_interest"],
            "baseline_mean": data["parent_mean"],
            "candidate_mean": data["child_mean"],
            "measured_by": "paired delta",
        }
    if pair.drift is not None:
        return {**pair.drift.evidence, "measured_by": "A/B over the pairs"}
    return {"outcome": "not judged"}
