"""Every judged answer of a session in one list: what was expected, what was observed, and how far
from its decision boundary it landed (harness.judge.margin), with the sample it rests on. The
experiment page and reports/summary.md show it, flagging each expected answer whose margin is under
thresholds.min_margin_se: an answer that close to its boundary may flip on another seed or machine.
"""

from __future__ import annotations

import math

from harness.judge.margin import below_minimum

NOT_EXPECTED = "not-expected"


def is_expected(entry: dict) -> bool:
    """A pre-registered answer the test holds (not a reported one: "not-expected ...", or no expectation)."""
    expected = entry.get("expected")
    return expected is not None and not str(expected).startswith(NOT_EXPECTED)


def answer_entry(key: str, kind: str, expected: str | None, observed: str, margin: dict | None, test: dict, note: str = "") -> dict:
    """kind: ladder / acceptance / ab. expected: the pre-registered answer, "not-expected" (reported
    only, knobs/design.yaml says why), or None where the answer has no statistic (a record check)."""
    return {"key": key, "kind": kind, "expected": expected, "observed": observed, "margin": margin, "note": note, "test": test}


def is_flagged(entry: dict, minimum: float) -> bool:
    """An expected answer (not a reported one) whose margin is under `minimum`, or not measured."""
    if not is_expected(entry) or entry.get("margin") is None:
        return False
    return below_minimum(entry["margin"], minimum)


def margin_text(margin: dict | None) -> str:
    if not margin:
        return "—"
    value = margin.get("se_units")
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "not measured"
    return "∞" if math.isinf(value) else f"{value:+.1f}"


def sample_text(margin: dict | None) -> str:
    sample = (margin or {}).get("sample") or {}
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sample.items() if k != "measured_for")


def render_markdown(answers: list[dict], minimum: float) -> str:
    """The answers table for reports/summary.md."""
    if not answers:
        return ""
    flagged = [a for a in answers if is_flagged(a, minimum)]
    lines = [
        "## Judged answers and their margins",
        "",
        f"Margin: the estimate's distance from its decision boundary in standard errors (harness/judge/margin.py), "
        f"signed so that positive is the side of the answer given. **Flagged**: an expected answer under "
        f"thresholds.min_margin_se = {minimum:g} (it may flip on another seed or machine). "
        f"{len(flagged)} of {sum(1 for a in answers if is_expected(a))} expected answers flagged.",
        "",
        "| Answer | Kind | Expected | Observed | Margin (SE) | Sample | Flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in answers:
        flag = f"**under {minimum:g} SE**" if is_flagged(a, minimum) else ""
        expected = a.get("expected") or "—"
        lines.append(
            f"| {a['key']} | {a['kind']} | {expected} | {a['observed']} | {margin_text(a.get('margin'))} | {sample_text(a.get('margin'))} | {flag} |"
        )
    return "\n".join(lines) + "\n"
