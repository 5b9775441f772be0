"""What kind of change a candidate is, decided from the resolved flags, and what its drift answer may say.

The seed counts an operator as improving train-inference consistency only "under fixed semantics
without hiding a framework fallback or changing the sampled-token contract". So before a drift
answer is worded, the gate reads what the candidate changed against its baseline (knobs/ab.yaml):

- **contract change**: a flag of the sampled-token contract (``sampling_contract_flags``: the A/B is
  rejected) or of the processed-logprob mode (``logprob_contract_flags``: which log-prob the trainer
  computes for a sampled token, e.g. the processed-logprob replay). Its drift answer is a semantic
  mitigation's, never "the operator reduced drift";
- **planted fault**: a planted fault flag (``planted_fault_flags``): a negative control, whose one
  acceptable answer is "increased";
- **operator**: only operator-path flags (``operator_path_flags``) changed: the drift answer is the
  operator's;
- **mitigation**: only mitigation flags (TIS, routing replay) changed.

Numbers in, words out: this module opens no file and launches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.spec import Knobs

OPERATOR, CONTRACT, PLANTED_FAULT, MITIGATION, NO_CHANGE = "operator", "contract change", "planted fault", "mitigation", "no change"


@dataclass(frozen=True)
class CandidateKind:
    """What the candidate changed, by kind, with the flags that decided it."""

    kind: str
    flags: dict[str, tuple] = field(default_factory=dict)  # flag -> (baseline value, candidate value), the deciding ones
    rejected: bool = False  # a sampled-token contract change: the A/B is not judged at all

    def changes(self) -> str:
        return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in sorted(self.flags.items())) or "no flag"

    def describe(self) -> str:
        return f"{self.kind} ({self.changes()})"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "flags": {k: list(v) for k, v in self.flags.items()}, "rejected": self.rejected}


def _listed(knobs: Knobs, name: str) -> set[str]:
    flag_list = getattr(knobs.ab, name, None)
    return set(flag_list.flags) if flag_list is not None else set()


def candidate_kind(baseline_flags: dict, candidate_flags: dict, knobs: Knobs) -> CandidateKind:
    """The kind of change from the two resolved specs' flags (a candidate that changes a contract is a
    contract change whatever else it also changes)."""
    a, b = dict(baseline_flags), dict(candidate_flags)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}

    def pick(names: set[str]) -> dict[str, tuple]:
        return {k: (a.get(k), b.get(k)) for k in sorted(changed & names)}

    sampling = pick(_listed(knobs, "sampling_contract_flags"))
    logprob = pick(_listed(knobs, "logprob_contract_flags"))
    if sampling or logprob:
        return CandidateKind(CONTRACT, {**sampling, **logprob}, rejected=bool(sampling))
    faults = pick(_listed(knobs, "planted_fault_flags"))
    if faults:
        return CandidateKind(PLANTED_FAULT, faults)
    operators = pick(_listed(knobs, "operator_path_flags"))
    if operators:
        return CandidateKind(OPERATOR, operators)
    mitigations = pick(_listed(knobs, "mitigation_flags"))
    return CandidateKind(MITIGATION, mitigations) if mitigations else CandidateKind(NO_CHANGE)


# The drift answer's words by kind and outcome (harness.judge.outcome: up, down, flat, inconclusive).
_OPERATOR_WORDS = {
    "down": "the operator reduced drift",
    "flat": "the operator: no reduction of interest",
    "up": "the operator increased drift",
    "inconclusive": "the operator: not shown either way",
}


def gate_label(kind: CandidateKind, outcome: str | None) -> str:
    """One line for the A/B row: what the drift outcome means for this kind of candidate."""
    if kind.rejected:
        return f"contract change, not judged: {kind.changes()} changes the sampled-token contract"
    if kind.kind == CONTRACT:
        return f"contract change ({kind.changes()}): drift {outcome or 'not judged'}, a semantic mitigation, not an operator result"
    if kind.kind == PLANTED_FAULT:
        caught = "caught: increased" if outcome == "up" else f"NOT caught: {outcome or 'not judged'}, where a planted fault must come out increased"
        return f"negative control, planted fault ({kind.changes()}): {caught}"
    if kind.kind == OPERATOR:
        return _OPERATOR_WORDS.get(outcome or "", f"the operator: {outcome or 'not judged'}") + f" ({kind.changes()})"
    return f"{kind.describe()}: drift {outcome or 'not judged'}"


# ---------------------------------------------------------------- the seed's A/B question 4
MIXED_YES, MIXED_NO, MIXED_INCONCLUSIVE = "yes", "no", "inconclusive"


@dataclass(frozen=True)
class MixedPathsAnswer:
    """ "Does it introduce numerical drift under BF16/FP8 mixed paths?", from the candidate's drift
    outcome on the bf16 rung and on the fp8 rung (each a judged A/B of the same operator)."""

    answer: str  # yes | no | inconclusive
    message: str
    evidence: dict


def mixed_paths(bf16: dict, fp8: dict) -> MixedPathsAnswer:
    """bf16, fp8: each pair's drift evidence: `ci` (candidate minus baseline), `effect_of_interest`,
    the means, and what measured it (the paired per-token delta or the A/B's drift answer). The
    question is one-sided: does the candidate increase drift beyond the effect of interest E?
      yes           on either path the interval lies above +E (the drift answer's "up");
      no            on both paths the interval's upper end lies below +E (an increase of interest is
                    ruled out, whether the path's drift went down, stayed flat, or its decrease is not decided);
      inconclusive  otherwise (an interval reaches past +E, or a path was not measured): not checked."""

    def judged(e: dict) -> dict:
        a, b = e.get("baseline_mean"), e.get("candidate_mean")
        ci, effect = e.get("ci"), e.get("effect_of_interest")
        state = "not measured"
        if ci is not None and effect is not None:
            state = "increased" if ci[0] > effect else ("not increased" if ci[1] < effect else "not decided")
        return {
            "state": state,
            "outcome": e.get("outcome"),
            "ci": ci,
            "effect_of_interest": effect,
            "relative_change": (b - a) / a if a and b is not None else None,
            "baseline_mean": a,
            "candidate_mean": b,
            "measured_by": e.get("measured_by"),
        }

    evidence = {"bf16": judged(bf16), "fp8": judged(fp8)}
    shown = "; ".join(
        f"{path}: {e['state']} ({(e['relative_change'] or 0):+.0%}, {e['measured_by'] or 'not measured'})" for path, e in evidence.items()
    )
    states = {path: e["state"] for path, e in evidence.items()}
    increased = [path for path, state in states.items() if state == "increased"]
    if increased:
        return MixedPathsAnswer(
            MIXED_YES, f"yes: drift increased beyond the effect of interest on the {' and '.join(increased)} path ({shown})", evidence
        )
    if all(state == "not increased" for state in states.values()):
        return MixedPathsAnswer(MIXED_NO, f"no: an increase of interest is ruled out on both paths ({shown})", evidence)
    return MixedPathsAnswer(
        MIXED_INCONCLUSIVE,
        f"inconclusive: a path's interval reaches past the effect of interest or was not measured ({shown}); not checked",
        evidence,
    )
