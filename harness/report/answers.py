"""Every judged answer of a session in one list: what was expected, what was observed, and how far
from its decision boundary it landed (harness.judge.margin), with the sample it rests on. The
experiment page and reports/summary.md show it, flagging each expected answer whose margin is under
thresholds.min_margin_se: an answer that close to its boundary may flip on another seed or machine.
"""

from __future__ import annotations

import math

from harness.judge.margin import below_minimum
from harness.report.record_model import Answer, Margin, TestRef

# How records written before named reports marked an answer their test did not hold.
LEGACY_NOT_EXPECTED = "not-expected"


def is_expected(entry: Answer) -> bool:
    """One of the main job's answers, held by its test (not one left for a named report, nor, in a
    record written before named reports, one marked not-expected)."""
    expected = entry.expected
    return expected is not None and getattr(entry, "report", None) is None and not str(expected).startswith(LEGACY_NOT_EXPECTED)


def answer_entry(
    key: str, kind: str, expected: str | None, observed: str, margin: dict | None, test: TestRef, note: str = "", report: str | None = None
) -> Answer:
    """kind: ladder / acceptance / ab. expected: the pre-registered answer. report: the named report
    (knobs/reports.yaml) the answer leaves the main job's answers for, None for one of them."""
    return Answer(key=key, kind=kind, expected=expected, observed=observed, margin=margin, note=note, test=test, report=report)


def answer_counts(answers: list[Answer]) -> dict[str, int]:
    """Expected answers against the answers the session reported, and those left for named reports."""
    main = [a for a in answers if a.report is None]
    return {
        "answers": len(main),
        "expected": sum(1 for a in main if is_expected(a)),
        "in_named_reports": len(answers) - len(main),
    }


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
    counts = answer_counts(answers)
    reported = [a for a in answers if a.report is not None]
    answers = [a for a in answers if a.report is None]
    lines = [
        "## Judged answers and their margins",
        "",
        f"Margin: how many standard errors past the point where its decision would flip the estimate stands (for an "
        f"interval-decided answer, past its interval's own t; harness/judge/margin.py), signed so that positive is the "
        f"side of the answer given. **Flagged**: an expected answer under "
        f"thresholds.min_margin_se = {minimum:g} (it may flip on another seed or machine). "
        f"{counts['expected']} expected of {counts['answers']} answers; {len(flagged)} flagged; "
        f"{counts['in_named_reports']} left for named reports (below).",
        "",
        "| Answer | Kind | Expected | Observed | Margin (SE) | Sample | Flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in answers:
        flag = f"**under {minimum:g} SE**" if is_flagged(a, minimum) else ""
        lines.append(f"| {a.key} | {a.kind} | {a.expected or '—'} | {a.observed} | {margin_text(a.margin)} | {sample_text(a.margin)} | {flag} |")
    if reported:
        lines += [
            "",
            "## Named reports: answers outside the main job's",
            "",
            "| Report | Answer | Observed | Margin (SE) | Why not held |",
            "|---|---|---|---|---|",
        ]
        for a in sorted(reported, key=lambda a: (a.report, a.key)):
            lines.append(f"| {a.report} | {a.key} | {a.observed} | {margin_text(a.margin)} | {a.note} |")
    return "\n".join(lines) + "\n"
