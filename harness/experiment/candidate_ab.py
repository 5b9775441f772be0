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
from harness.judge import ab
from harness.judge.ab_performance import performance_half
from harness.judge.candidate_gate import MixedPathsAnswer, candidate_kind, gate_label, mixed_paths
from harness.records.runload import Run
from harness.spec import Knobs

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
    findings: list[str] = field(default_factory=list)  # what differs from knobs/candidate.yaml's expectation

    @property
    def outcome(self) -> str | None:
        return (self.drift.evidence or {}).get("outcome") if self.drift else None

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
    return chosen.embedded if backend == "embedded" else chosen.cluster


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
    if expected.drift != "not-expected" and answer.outcome != expected.drift:
        findings.append(f"drift: expected {expected.drift} (knobs/candidate.yaml: {expected.design}), got {answer.drift.message}")
    if expected.reward_preserved != "not-expected" and answer.reward.passed != expected.reward_preserved:
        findings.append(f"reward preserved: expected {expected.reward_preserved}, got {answer.reward.message}")
    return findings


def judge_mixed_paths(knobs: Knobs, answers: dict[str, PairAnswer], backend: str) -> tuple[MixedPathsAnswer, list[str]]:
    """The seed's A/B question 4 from the bf16 and fp8 pairs' drift answers, and what differs from its expectation."""
    chosen = knobs.candidate.mixed_paths
    bf16, fp8 = answers[chosen.bf16], answers[chosen.fp8]
    evidence = [pair.drift.evidence if pair.drift else {"outcome": "not judged"} for pair in (bf16, fp8)]
    answer = mixed_paths(*evidence)
    expected = chosen.expect.get(backend)
    findings = []
    if expected not in (None, "not-expected") and answer.answer != expected:
        findings.append(f"BF16/FP8 mixed paths: expected {expected} (knobs/candidate.yaml mixed_paths: {chosen.design}), got {answer.message}")
    return answer, findings
