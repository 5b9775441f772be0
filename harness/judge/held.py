"""A judged answer held against what knobs/ pre-registered for it: passed, failed, or reported.

Every answer of the main job is either expected (one outcome, written before the runs that judge it)
or leaves the main job's answers for a named report (knobs/reports.yaml, with its reason). `Held` is
the one decision a front end acts on: a pytest item passes, fails, or is skipped naming the report; an
answer that was not judged (a missing run, too few steps, one seed where two are needed) is a failure
where it is expected and never a pass anywhere. Numbers and verdicts in, a decision out: no file reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from harness.judge.expectations import expectation_findings
from harness.spec import Knobs
from harness.spec.schema import Reported, Rung

if TYPE_CHECKING:
    from harness.judge.ab import Answer
    from harness.judge.ladder import RungJudgement
    from harness.judge.verdict import Verdict
    from harness.records.runload import Run

__all__ = ["Held", "hold_rung", "hold_criterion", "hold_ab", "ab_expected_text", "NOT_JUDGED"]

NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Held:
    status: Literal["passed", "failed", "reported"]
    message: str
    expected: str  # the pre-registered answer, as the answers table shows it
    reported: dict[str, Reported] = field(default_factory=dict)  # answer -> the named report it leaves for

    @property
    def skip_reason(self) -> str:
        """What a front end says when the whole check left for named reports (status "reported")."""
        return "; ".join(f"{answer} reported in {r.report!r} (knobs/reports.yaml): {r.reason}" for answer, r in self.reported.items())


def rung_expected_text(rung: Rung) -> str:
    expect = rung.expect
    parts = [expect.direction] if expect.direction_expected else []
    if expect.class_expected:
        parts.append(f"class {expect.drift_class}")
    parts += [f"{drift} ruled out" for drift in expect.rules_out]
    parts += [f"{answer} in report {r.report}" for answer, r in expect.reported.items()]
    return ", ".join(parts)


def hold_rung(rung: Rung, judgement: RungJudgement, run: Run, knobs: Knobs, parent: Run | None = None, side: Sequence[Run] | None = None) -> Held:
    """The rung's expected answers (direction, class, the classes it rules out, its bounds) against its
    judgement; the answers its file reports elsewhere are carried, not held. ``side``: the rung's runs at
    the stage's seeds, the run first (its side bounds)."""
    expected = rung_expected_text(rung)
    if judgement.problems:
        return Held("failed", f"{NOT_JUDGED}: " + "; ".join(judgement.problems), expected, dict(rung.expect.reported))
    findings = expectation_findings(rung, judgement, run, knobs, parent, side)
    if findings:
        return Held("failed", judgement.summary() + "\n  " + "\n  ".join(findings), expected, dict(rung.expect.reported))
    expect = rung.expect
    nothing_held = not (
        expect.direction_expected or expect.class_expected or expect.rules_out or expect.bound_names() or expect.exactly_zero_every_step
    )
    return Held("reported" if nothing_held else "passed", judgement.summary(), expected, dict(rung.expect.reported))


def hold_criterion(criterion, verdict: Verdict, backend: str) -> Held:
    """An acceptance criterion: it must pass, unless knobs/acceptance.yaml sends it to a named report on
    this backend; a verdict that was not judged never passes."""
    reported = criterion.reported.get(backend)
    if reported is not None:
        return Held("reported", verdict.message, f"report {reported.report}", {"answer": reported})
    if not verdict.passed:
        return Held("failed", f"{criterion.seed_text}\n  -> {verdict.message}", "pass")
    if (verdict.evidence or {}).get("outcome") == NOT_JUDGED:
        return Held("failed", f"{criterion.seed_text}\n  -> {NOT_JUDGED}, yet marked passed: {verdict.message}", "pass")
    return Held("passed", verdict.message, "pass")


def ab_expected_text(expected) -> str:
    if isinstance(expected, Reported):
        return f"report {expected.report}"
    return "yes" if expected else "no (flat)"


def hold_ab(answer: Answer, knobs: Knobs, backend: str, question: str, candidate: str | None = None) -> Held:
    """An A/B question (or mode consistency) against knobs/ab.yaml's expectation on `backend`: a yes
    passes, a decided no is flat, a named report is carried; an inconclusive or unjudged answer never passes."""
    expected, why = knobs.ab.expected_to_pass(question, backend, candidate)
    shown = ab_expected_text(expected)
    where = f"candidates.{candidate}.expect" if candidate else "expect"
    if isinstance(expected, Reported):
        return Held("reported", answer.message, shown, {"answer": expected})
    if expected is False:
        if answer.passed:
            return Held("failed", f"{answer.question} passed, but knobs/ab.yaml {where}.{backend} says it does not: {why}\n  {answer.message}", shown)
        if answer.evidence.get("outcome") != "flat":
            return Held("failed", f"{answer.question}: expected flat (a decided no), got {answer.evidence.get('outcome')}: {answer.message}", shown)
        return Held("passed", f"the gate answers no, as knobs/ab.yaml {where}.{backend} expects: {answer.message}", shown)
    if not answer.passed:
        return Held("failed", f"{answer.question} {answer.message}", shown)
    return Held("passed", answer.message, shown)
