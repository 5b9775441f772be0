"""The experiment page's "Ready for Blackwell operator work?" and the candidate operator's A/B.

    readiness_section(record) -> str   the seed's readiness criteria: verdict, expected, the numbers
                                       each rests on, and which make target decided it
    candidate_section(record) -> str   each candidate pair through the gate (its label: operator,
                                       contract change, planted fault), drift and reward answers, the
                                       performance half, and the seed's A/B question 4

Entries are the record's `readiness` and `candidate` (harness.report.record_model). A record made by
one target holds only its own answers; each section says which target makes what it lacks.
"""

from __future__ import annotations

import html

from harness.report.record_model import CandidatePair, ExperimentRecord, Readiness

BADGE = {"met": "pass", "not met": "fail", "not checked": "skip"}


def _esc(value) -> str:
    return html.escape(str(value))


def _readiness_row(entry: Readiness, record: ExperimentRecord) -> str:
    outcome = record.outcome(entry.test) or "not reported"
    state = f"<span class='{BADGE.get(entry.verdict, 'skip')}'>{_esc(entry.verdict)}</span>"
    return (
        f"<tr><td>{_esc(entry.seed_text)}</td><td>{state}</td><td>{_esc(entry.expected)}</td>"
        f"<td>{_esc(outcome)}</td><td class='small'>{_esc(entry.message.split(': ', 1)[-1])}</td><td>{_esc(entry.target)}</td></tr>"
    )


def readiness_section(record: ExperimentRecord) -> str:
    head = "<h2>Ready for Blackwell operator work?</h2>"
    if not record.readiness:
        return f"<section id='readiness'>{head}<p class='none'>not decided in this record: the main job (make baseline) decides the seed's readiness criteria (tests/acceptance/test_readiness.py)</p></section>"
    met = sum(1 for e in record.readiness if e.verdict == "met")
    lead = (
        f"<p class='small'>The seed's additional acceptance criteria (knobs/readiness.yaml): {met} of {len(record.readiness)} met. "
        "Each verdict is the evidence's, whatever it is; a criterion that could not be checked is never met. "
        "The candidate operator's A/B (pairs, negative control, BF16/FP8 mixed paths) is decided by make candidate "
        "and shown on that target's page (reports/candidate/experiment/index.html) unless this record holds it.</p>"
    )
    cols = "".join(f"<th>{h}</th>" for h in ("criterion (seed)", "verdict", "expected", "test", "evidence", "decided by"))
    rows = "".join(_readiness_row(e, record) for e in record.readiness)
    return f"<section id='readiness'>{head}{lead}<table class='readiness'><thead><tr>{cols}</tr></thead><tbody>{rows}</tbody></table></section>"


def _performance(rows: list[dict]) -> str:
    cells = []
    for row in rows:
        figure = row["figure"]
        if row.get("note"):
            cells.append(f"<tr><td>{_esc(figure['label'])}</td><td colspan='4'>{_esc(row['note'])}</td></tr>")
            continue
        ci = row.get("ci") or [float("nan")] * 2
        cells.append(
            f"<tr><td>{_esc(figure['label'])} ({_esc(figure['unit'])})</td><td>{row['baseline']:.4g}</td><td>{row['candidate']:.4g}</td>"
            f"<td>{row['ratio']:.2f}x</td><td>{row['difference']:+.3g} [{ci[0]:+.3g}, {ci[1]:+.3g}]</td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("figure", "baseline", "candidate", "ratio", "difference [interval]"))
    return f"<table class='perf'><thead><tr>{head}</tr></thead><tbody>{''.join(cells)}</tbody></table>"


def _pair(entry: CandidatePair, record: ExperimentRecord) -> str:
    data = entry.data
    outcome = record.outcome(entry.test) or "not reported"
    if entry.name == "mixed-paths":
        return (
            f"<h3>BF16/FP8 mixed paths (the seed's A/B question 4): {_esc(data.get('answer'))}</h3><p>{_esc(entry.label)} — test {_esc(outcome)}</p>"
        )
    parts = [
        f"<h3>{_esc(entry.name)}: {_esc(data.get('rung'))} at {_esc(data.get('stage'))}</h3>",
        f"<p><b>{_esc(entry.label)}</b> — test {_esc(outcome)}</p>",
    ]
    seeds = ", ".join(str(s) for s in data.get("seeds") or [])
    parts.append(
        f"<p class='small'>seeds {_esc(seeds)}; runs {_esc(', '.join(data.get('baseline_runs') or []))} → {_esc(', '.join(data.get('candidate_runs') or []))}</p>"
    )
    if data.get("contract"):
        parts.append(f"<p class='fail'>A/B rejected: {_esc('; '.join(data['contract']))}</p>")
    for key in ("drift", "reward"):
        if data.get(key):
            parts.append(f"<p class='small'>{key} (the A/B over the pairs): {_esc(data[key]['message'])}</p>")
    paired = data.get("paired")
    if paired and "not_checked" in paired:
        parts.append(f"<p class='small'>paired per-token delta: not checked: {_esc(paired['not_checked'])}</p>")
    elif paired:
        parts.append(
            f"<p class='small'>paired per-token delta on the baseline's tokens (both configurations score them): "
            f"{paired['parent_mean']:.4g} -> {paired['child_mean']:.4g}, {paired['delta']:+.3g} [{paired['low']:+.3g}, {paired['high']:+.3g}] "
            f"over {paired['sequences']} sequences: {_esc(paired['outcome'])}</p>"
        )
    if data.get("performance"):
        parts.append(_performance(data["performance"]))
    if data.get("findings"):
        parts.append(f"<p class='fail'>against its expectation: {_esc('; '.join(data['findings']))}</p>")
    return "".join(parts)


def candidate_section(record: ExperimentRecord) -> str:
    head = "<h2>The candidate operator at the boundary that carries the drift</h2>"
    if not record.candidate:
        return f"<section id='candidate'>{head}<p class='none'>not in this record: make candidate runs the candidate operator's A/B pairs and negative control (knobs/candidate.yaml)</p></section>"
    lead = (
        "<p class='small'>Each pair is a rung against the same rung with the candidate switched on in both engines, judged by the "
        "A/B gate under fixed semantics; the gate names what kind of change the candidate is (an operator, a contract change, a "
        "planted fault) before it words the drift answer. Timings and memory: the trainer process on this CPU, recorded, not gated.</p>"
    )
    return f"<section id='candidate'>{head}{lead}{''.join(_pair(e, record) for e in record.candidate)}</section>"
