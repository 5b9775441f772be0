"""Did the candidate operator run? Judged from the calls each engine counted, never from the flags.

Numbers in, verdict out: the candidate run's counts (harness/records/operator_calls.py, written by
the embedded trainer from counters inside the calls), optionally the baseline's, and how many
rollouts the candidate logged. The candidate executed only when every (side, pass, operator) its
flags asked for counted at least one call and one token, no other operator returned tokens in
that pass (a fallback, even a partial one), the counts cover every rollout the run logged, and it
asked for something the baseline did not. Anything that cannot be read is "not checked": a
failure of the gate too, never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.records.operator_calls import OperatorCalls

EXECUTED, NOT_EXECUTED, NOT_CHECKED = "executed", "not executed", "not checked"
# One operator a pass: where another returned tokens beside it, the candidate ran only in part.
# The engine-norm pass counts one registered implementation, whatever else the engine runs; the
# linear pass is the linear operator's (harness.embedded.linear_operator: a layer it could not take
# is counted as native there).
EXCLUSIVE_PASSES = ("recompute", "training", "sampler", "linear")


@dataclass
class Execution:
    status: str  # executed | not executed | not checked
    message: str
    evidence: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == EXECUTED


def _expected_set(calls: OperatorCalls) -> set[tuple[str, str, str]]:
    return {(e.side, e.pass_, e.operator) for e in calls.expected}


def judge_execution(
    candidate: OperatorCalls | None,
    candidate_problem: str | None = None,
    *,
    baseline: OperatorCalls | None = None,
    rollouts_logged: int | None = None,
) -> Execution:
    """The verdict on one candidate run; ``candidate_problem`` says why its counts could not be read."""
    if candidate is None:
        return Execution(NOT_CHECKED, f"candidate not checked: {candidate_problem or 'no operator counts'}")
    evidence: dict = {"expected": [], "rollouts_counted": candidate.rollouts_counted, "problems": list(candidate.problems)}
    processes = {side: getattr(candidate.side(side), "process", None) for side in ("trainer", "rollout")}
    evidence["processes"] = processes
    if processes["rollout"] is not None and processes["rollout"] == processes["trainer"]:
        evidence["rollout_counted_in"] = "the trainer's process (in-process engine)"
    elif processes["rollout"] is not None:
        evidence["rollout_counted_in"] = f"the engine's own process (pid {processes['rollout']}, not the trainer's {processes['trainer']})"

    zero, fallback, unread = [], [], []
    for e in candidate.expected:
        side = candidate.side(e.side)
        if side is None:
            unread.append(f"the {e.side} side's counts were not read back" + (f" ({candidate.problems[0]})" if candidate.problems else ""))
            continue
        got = side.count(e.pass_, e.operator)
        others = {op: c.tokens for op, c in side.passes.get(e.pass_, {}).items() if op != e.operator and c.tokens > 0}
        evidence["expected"].append(
            {"side": e.side, "pass": e.pass_, "operator": e.operator, "calls": got.calls, "tokens": got.tokens, "others": others}
        )
        if got.calls == 0 or got.tokens == 0:
            instead = f"; counted instead: {others}" if others else ""
            zero.append(f"{e.side} {e.pass_} counted {got.calls} calls / {got.tokens} tokens of {e.operator!r}{instead}")
        elif others and e.pass_ in EXCLUSIVE_PASSES:
            fallback.append(f"{e.side} {e.pass_}: {got.tokens} tokens by {e.operator!r} but {others} by another operator")

    if zero:
        return Execution(NOT_EXECUTED, "candidate not executed: " + "; ".join(zero), evidence)
    if fallback:
        return Execution(NOT_EXECUTED, "candidate not executed alone (a fallback in part of the pass): " + "; ".join(fallback), evidence)
    if unread:
        return Execution(NOT_CHECKED, "candidate not checked: " + "; ".join(unread), evidence)
    if baseline is not None and _expected_set(baseline) == _expected_set(candidate):
        ops = sorted({e.operator for e in candidate.expected})
        return Execution(NOT_EXECUTED, f"candidate not executed: it asks for the baseline's own operators ({', '.join(ops)})", evidence)
    if rollouts_logged is not None and candidate.rollouts_counted < rollouts_logged:
        return Execution(
            NOT_CHECKED, f"candidate not checked: the counts cover {candidate.rollouts_counted} of the {rollouts_logged} rollouts logged", evidence
        )
    shown = ", ".join(f"{x['side']} {x['pass']} {x['operator']} {x['calls']} calls / {x['tokens']} tokens" for x in evidence["expected"])
    return Execution(EXECUTED, f"candidate executed: {shown}", evidence)


def judge_pair_execution(
    candidate: OperatorCalls | None,
    candidate_problem: str | None,
    baseline: OperatorCalls | None,
    baseline_problem: str | None,
    *,
    candidate_rollouts: int,
    baseline_rollouts: int,
) -> Execution:
    """The A/B's "candidate executed" answer on one pair: the candidate's operator counted on both
    engines (judge_execution against the baseline's counts), the baseline's own operators counted
    too, and every sampled token's log-prob computed once by each side in each pass."""
    verdict = judge_execution(candidate, candidate_problem, baseline=baseline, rollouts_logged=candidate_rollouts)
    if not verdict.passed:
        return verdict
    if baseline is None:
        return Execution(NOT_CHECKED, f"baseline not checked: {baseline_problem or 'no operator counts'}", verdict.evidence)
    own = judge_execution(baseline, rollouts_logged=baseline_rollouts)
    if not own.passed:
        return Execution(own.status, f"the baseline's own operators: {own.message}", verdict.evidence)
    tokens = {(row["side"], row["pass"]): row["tokens"] for row in verdict.evidence["expected"] if row["pass"] in EXCLUSIVE_PASSES}
    if len(set(tokens.values())) > 1:
        return Execution(NOT_EXECUTED, f"candidate not executed on every token: the passes counted different tokens {tokens}", verdict.evidence)
    return verdict
