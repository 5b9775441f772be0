"""Every judged answer of a session in one list: what was expected, what was observed, and how far
from its decision boundary it landed (harness.judge.margin), with the sample it rests on. The
experiment page and reports/summary.md show it, flagging each expected answer whose margin is under
thresholds.min_margin_se: an answer that close to its boundary may flip on another seed or machine.
"""

from __future__ import annotations

import math

from harness.judge.margin import below_minimum
from harness.report.record_model import Answer, Margin, TestRef

NOT_EXPECTED = "not-expected"


def is_expected(entry: Answer) -> bool:
    """A pre-registered answer the test holds (not a reported one: "not-expected ...", or no expectation)."""
    expected = entry.expected
    return expected is not None and not str(expected).startswith(NOT_EXPECTED)


def answer_entry(key: str, kind: str, expected: str | None, observed: str, margin: dict | None, test: TestRef, note: str = "") -> Answer:
    """kind: ladder / acceptance / ab / budget. expected: the pre-registered answer, "not-expected" (reported
    only, knobs/design.yaml says why), or None where the answer has no statistic (a record check)."""
    return Answer(key=key, kind=kind, expected=expected, observed=observed, margin=margin, note=note, test=test)


def is_flagged(entry: Answer, minimum: float) -> bool:
    """An expected answer (not a reported one) whose margin is under `minimum`, or not measured."""
    if not is_expected(entry) or entry.margin is None:
        return False
    return below_minimum(entry.margin.model_dump(), minimum)


def margin_text(margin: Margin | None) -> str:
    if margin is None:
        return "—"
    value = margin.se_units
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "not measured"
    return "∞" if math.isinf(value) else f"{value:+.1f}"


def sample_text(margin: Margin | None) -> str:
    sample = margin.sample if margin is not None else {}
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sample.items() if k != "measured_for")


def render_markdown(answers: list[Answer], minimum: float) -> str:
    """The answers table for reports/summary.md."""
    if not answers:
        return ""
    flagged = [a for a in answers if is_flagged(a, minimum)]
    lines = [
        "## Judged answers and their margins",
        "",
        f"Margin: how many standard errors past the point where its decision would flip the estimate stands (for an "
        f"interval-decided answer, past its interval's own t; harness/judge/margin.py), signed so that positive is the "
        f"side of the answer given. **Flagged**: an expected answer under "
        f"thresholds.min_margin_se = {minimum:g} (it may flip on another seed or machine). "
        f"{len(flagged)} of {sum(1 for a in answers if is_expected(a))} expected answers flagged.",
        "",
        "| Answer | Kind | Expected | Observed | Margin (SE) | Sample | Flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in answers:
        flag = f"**under {minimum:g} SE**" if is_flagged(a, minimum) else ""
        lines.append(f"| {a.key} | {a.kind} | {a.expected or '—'} | {a.observed} | {margin_text(a.margin)} | {sample_text(a.margin)} | {flag} |")
    return "\n".join(lines) + "\n"
