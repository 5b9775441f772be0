"""The experiment page: one self-contained index.html drawn from an experiment record.

    render_page(record, baseline=None) -> str      HTML (inline CSS and SVG, no script)
    write_page(record, out, baseline=None) -> Path

First screen (1400 x 1000): the seed's summary table with intervals, replicates and verdicts; the
ladder figure beside the seed's five A/B questions. Below: worst tokens, the environment and argv
of the baseline, the Allure tests behind every entry. With `baseline` (--compare) each row, rung
and answer is shown against the baseline record's, with the delta and a verdict.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from harness.report.budget_section import budget_section
from harness.report.experiment_record import SEED_QUESTIONS
from harness.report.ladder_figure import ladder_svg
from harness.report.readiness_section import candidate_section, readiness_section
from harness.report.record_model import AbAnswer, Container, Cpu, ExperimentRecord, Gpus, Hardware, HarnessCommit, Package, Rung, TestRef, Vime
from harness.report.summary import SEED_COLUMNS

ALLURE_INDEX = "../allure-report/index.html"  # the page sits in reports/experiment/
MAX_BYTES = 2_000_000

CSS = """
*{box-sizing:border-box}
body{font:13px/1.35 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
main{max-width:1400px;margin:0 auto;padding:10px 16px}
h1{font-size:19px;margin:0 0 2px}
h2{font-size:15px;margin:8px 0 4px;border-bottom:1px solid #dde2ea;padding-bottom:2px}
.lead{color:#4a5568;margin:0 0 8px;font-size:12px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #dde2ea;padding:2px 5px;text-align:left;vertical-align:top}
td{overflow-wrap:anywhere}
code{overflow-wrap:anywhere}
#summary{table-layout:fixed;font-size:12px}#summary th{white-space:normal}#summary td,#summary th{padding:1px 4px;line-height:1.22}
#summary.compare{table-layout:auto}#summary.compare td:first-child,#summary.compare td:nth-child(3){white-space:nowrap}
.ci{display:block;font-size:10.5px;color:#4a5568}
th{background:#eef2f7;font-weight:600;font-size:12px;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.notes{font-size:11px;color:#4a5568}
.pass{color:#fff;background:#2f855a;border-radius:3px;padding:0 5px;font-weight:600;white-space:nowrap}
.fail{color:#fff;background:#c53030;border-radius:3px;padding:0 5px;font-weight:600;white-space:nowrap}
.skip{color:#fff;background:#718096;border-radius:3px;padding:0 5px;font-weight:600;white-space:nowrap}
.none{color:#718096;font-style:italic}
.row2{display:grid;grid-template-columns:minmax(0,52fr) minmax(0,48fr);gap:14px;margin-top:6px}
svg.ladder{width:100%;height:auto;background:#fff;border:1px solid #dde2ea}
.qa{list-style:none;margin:0;padding:0}
.qa li{background:#fff;border:1px solid #dde2ea;border-radius:4px;padding:3px 7px;margin-bottom:4px}
.qa .q{display:flex;justify-content:space-between;align-items:baseline;gap:8px;font-weight:600;font-size:12.5px}
.qa .v{white-space:nowrap}
.qa .m{display:block;font-size:12px;color:#2d3748}
.qa .e{font-size:11px;color:#718096}
.qa summary{display:block;list-style:none;font-weight:400}.qa summary::-webkit-details-marker{display:none}
.qa .more{font-size:11px;color:#4a6fa5;white-space:nowrap}.qa .more::before{content:"▸ "}.qa details[open] .more::before{content:"▾ "}
pre{background:#fff;border:1px solid #dde2ea;padding:6px;font-size:11px;overflow:auto;max-height:340px}
details summary{cursor:pointer;font-weight:600}
.small{font-size:11px;color:#4a5568}
.scroll{overflow-x:auto;max-width:100%}#worst{font-size:11px;width:auto}
.delta-better{color:#2f855a;font-weight:600}.delta-worse{color:#c53030;font-weight:600}
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def fmt(value, spec: str = ".4g", signed: bool = False) -> str:
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        return "—" if value is None else esc(value)
    return f"{value:{'+' if signed else ''}{spec}}"


def interval(ci, signed: bool = False) -> str:
    if not ci or len(ci) != 2 or any(v is None for v in ci):
        return ""
    return f"<span class='ci'>[{fmt(ci[0], '.3g', signed)}, {fmt(ci[1], '.3g', signed)}]</span>"


def badge(outcome: str | None) -> str:
    outcome = outcome or "not reported"
    css = {"passed": "pass", "failed": "fail", "skipped": "skip"}.get(outcome, "skip")
    return f'<span class="{css}">{esc(outcome)}</span>'


# Allure title -> the report's test result id, set by render_page from the built report's
# test-results.json: a link then opens that test (#/<id>); without it, the report's front page.
_ALLURE_IDS: dict[str, str] = {}


def allure_href(title: str | None) -> str:
    test_id = _ALLURE_IDS.get(title or "")
    return f"{ALLURE_INDEX}#/{test_id}" if test_id else ALLURE_INDEX


def test_cell(test: TestRef | None) -> str:
    if test is None:
        return '<span class="none">no test recorded</span>'
    title = test.title or test.name
    return f'<a href="{allure_href(title)}" title="{esc(test.nodeid)}">{esc(title)}</a>'


def allure_ids(report_dir: str | Path) -> dict[str, str]:
    """Title -> test result id from an Allure 3 report's test-results.json ({"byId": {id: {name}}});
    titles that name several results are left out (their link stays the front page)."""
    import json

    try:
        by_id = json.loads((Path(report_dir) / "test-results.json").read_text()).get("byId", {})
    except (OSError, ValueError, AttributeError):
        return {}
    names: dict[str, list[str]] = {}
    for test_id, result in by_id.items():
        if isinstance(result, dict) and result.get("name"):
            names.setdefault(result["name"], []).append(test_id)
    return {name: ids[0] for name, ids in names.items() if len(ids) == 1}


def compare_verdict(candidate, baseline, mean_key: str, ci_key: str) -> tuple[str, str]:
    """(delta cell, verdict) of candidate minus baseline for one figure (two rows or two rungs of the
    records, by field name). The records hold means and intervals, not the steps, so a difference
    is called only when the two intervals do not overlap."""
    a, b = getattr(baseline, mean_key), getattr(candidate, mean_key)
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return "—", "not comparable (missing in one record)"
    delta = f"{b - a:+.3g}" + (f" ({(b - a) / a:+.0%})" if a else "")
    ca, cb = getattr(baseline, ci_key), getattr(candidate, ci_key)
    if not ca or not cb:
        return delta, "no interval in one record"
    if cb[1] < ca[0]:
        return f'<span class="delta-better">{delta}</span>', "lower (intervals apart)"
    if cb[0] > ca[1]:
        return f'<span class="delta-worse">{delta}</span>', "higher (intervals apart)"
    return delta, "no clear change (intervals overlap)"


# -- sections ---------------------------------------------------------------------------------


def headline(record: ExperimentRecord, baseline: ExperimentRecord | None) -> str:
    counts = {k: sum(1 for v in record.outcomes.values() if v == k) for k in ("passed", "failed", "skipped")}
    options = record.session.options
    title = "VIME train-inference mismatch: experiment record" + (" (candidate vs baseline record)" if baseline else "")
    lead = (
        f"{len(record.rungs)} rung(s) judged, {len(record.ab)} A/B answer(s); tests: {counts['passed']} passed, "
        f"{counts['failed']} failed, {counts['skipped']} skipped. Mode {esc(options.mode)}, backend {esc(options.backend)}, "
        f"recorded {esc(record.created)}."
    )
    if baseline:
        lead += f" Compared with the baseline record {esc(baseline.path)} (recorded {esc(baseline.created)})."
    return f"<h1>{title}</h1><p class='lead'>{lead}</p>"


ROW_HEADERS = (
    *SEED_COLUMNS[:-1],
    f"{SEED_COLUMNS[-1]} [95% CI]",
    "Δ vs parent [95% CI]",
    "Step Time Mean",
    "Replicates",
    "Verdict",
    "Notes",
)

SUMMARY_WIDTHS = (10, 10.5, 6, 9, 10, 5.5, 10, 9, 6, 6.5, 5.5, 12)


def summary_table(record: ExperimentRecord, baseline: ExperimentRecord | None) -> str:
    rows = record.rows
    if not rows:
        return "<h2>Summary</h2><p class='none'>no summary row in this record (no judged test ran)</p>"
    base_rows = {r.run: r for r in baseline.rows} if baseline else {}
    headers = list(ROW_HEADERS) + (["Baseline record mean [CI]", "Δ vs baseline record", "Change"] if baseline else [])
    body = []
    for row in rows:
        cells = [
            f"<td>{esc(row.run)}</td>",
            f"<td>{esc(row.hardware)}</td>",
            f"<td>{esc(row.mode)}</td>",
            f"<td class='wrap'>{esc(row.precision)}</td>",
            f"<td class='wrap'>{esc(row.operator_path)}</td>",
            f"<td class='num'>{fmt(row.final_reward, '.3f')}</td>",
            f"<td class='num'>{fmt(row.abs_diff_mean)} {interval(row.abs_diff_ci)}</td>",
            f"<td class='num'>{fmt(row.delta_vs_parent, '.3g', True)} {interval(row.delta_ci, True)}</td>",
            f"<td class='num'>{fmt(row.step_time_mean, '.3g')} s</td>",
            f"<td class='num'>{esc(row.replicates)}</td>",
            f"<td>{badge(record.outcome(row.test))}</td>",
            f"<td class='notes'>{esc(row.notes)}</td>",
        ]
        if baseline:
            other = base_rows.get(row.run)
            if other is None:
                cells += ["<td class='none'>not in baseline record</td>", "<td>—</td>", "<td>—</td>"]
            else:
                delta, verdict = compare_verdict(row, other, "abs_diff_mean", "abs_diff_ci")
                cells += [
                    f"<td class='num'>{fmt(other.abs_diff_mean)} {interval(other.abs_diff_ci)}</td>",
                    f"<td class='num'>{delta}</td>",
                    f"<td>{esc(verdict)}</td>",
                ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    # Fixed column shares so the table fits 1400 px with the figure still on the first screen.
    compare_class = " class='compare'" if baseline else ""
    widths = "" if baseline else "<colgroup>" + "".join(f"<col style='width:{w}%'>" for w in SUMMARY_WIDTHS) + "</colgroup>"
    most = max(row.replicates for row in rows)
    if most > 1:
        spread = (
            "Replicates: seeds run per rung (the stage's knob). With more than one, a mean is the seeds' mean and its 95% interval "
            "combines each run's block bootstrap over its steps after the warm-up with the spread between the seeds when that is "
            "larger than the steps explain (docs/statistics.md)."
        )
    else:
        spread = (
            "Replicates: 1 run per rung in this record; every interval is a 95% circular block-bootstrap interval over that run's "
            "steps after the warm-up (docs/statistics.md), not a spread across replicate runs."
        )
    note = spread + " Verdict: the outcome of the test that judged the row."
    if baseline:
        note += " Change against the baseline record: called only where the two intervals do not overlap (the records keep means and intervals, not steps)."
    return (
        f"<h2>Summary (the seed's table)</h2><table id='summary'{compare_class}>{widths}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<p class='small'>{esc(note)}</p>"
    )


def ab_section(record: ExperimentRecord, baseline: ExperimentRecord | None) -> str:
    answers = {a.key: a for a in record.ab}
    base_answers = {a.key: a for a in baseline.ab} if baseline else {}
    items = []
    contract = answers.get("contract")
    if contract:
        items.append(
            f"<li>{_question_line('Same workload (contract)', badge(record.outcome(contract.test)))}"
            f"<span class='m'>{esc(_short(contract.message))}</span></li>"
        )
    executed = answers.get("candidate-executed")
    if executed:
        # The operator's own calls, counted inside both engines: without them no answer below is about the candidate.
        items.append(
            f"<li><details><summary>{_question_line('Candidate executed (operator calls counted in both engines)', badge(record.outcome(executed.test)))}"
            f"<span class='m'>{esc(_short(executed.message))} <span class='more'>counts</span></span></summary>"
            f"<div class='e'>{esc(_evidence(executed.evidence))}</div></details></li>"
        )
    for number, (key, question) in enumerate(SEED_QUESTIONS, 1):
        answer = answers.get(key) if key else None
        if answer is None:
            why = "no test of this suite answers it" if key is None else "no answer to it in this record (its test did not run in this session)"
            line = _question_line(f"{number}. {question}", "<span class='skip'>not answered</span>")
            items.append(f"<li>{line}<span class='m e'>{why}</span></li>")
            continue
        outcome = record.outcome(answer.test)
        gated = "yes" if answer.passed else "no"
        extra = ""
        if baseline and key in base_answers:
            other = base_answers[key]
            extra = f"<div class='e'>baseline record: {'yes' if other.passed else 'no'}: {esc(_short(other.message))}</div>"
        # The question and its answer are the details' summary, so they stay on the first screen
        # while the evidence folds under a click; "evidence" ends the answer's line, not one of its own.
        items.append(
            f"<li><details><summary>{_question_line(f'{number}. {question}', badge(outcome) + f' <b>{esc(gated)}</b>')}"
            f"<span class='m'>{esc(_short(answer.message))} <span class='more'>evidence, runs and test</span></span></summary>"
            f"<div class='e'>{_full(answer.message)}{esc(_evidence(answer.evidence))}"
            f"<div>runs {esc(answer.baseline_run)} → {esc(answer.candidate_run)}; test {test_cell(answer.test)}</div></div></details>{extra}</li>"
        )
    further = further_candidates(answers, record)
    return f"<section><h2>A/B gate: the seed's five questions</h2><ul class='qa' id='ab'>{''.join(items)}</ul>{further}</section>"


def further_candidates(answers: dict[str, AbAnswer], record: ExperimentRecord) -> str:
    """Candidates beyond the pair's own (knobs/ab.yaml `candidates`): their answers are keyed
    `NAME:question`; one line each, the question's verdict and the first words of its answer."""
    by_candidate: dict[str, list[tuple[str, AbAnswer]]] = {}
    for key, answer in answers.items():
        if ":" in key:
            name, question = key.split(":", 1)
            by_candidate.setdefault(name, []).append((question, answer))
    blocks = []
    for name, entries in sorted(by_candidate.items()):
        lines = "".join(
            f"<li>{_question_line(question, badge(record.outcome(answer.test)) + ' <b>' + ('yes' if answer.passed else 'no') + '</b>')}"
            f"<span class='m'>{esc(_short(answer.message))}</span></li>"
            for question, answer in entries
        )
        blocks.append(f"<h3>Further candidate: {esc(name)}</h3><ul class='qa'>{lines}</ul>")
    return "".join(blocks)


def _question_line(question: str, verdict_html: str) -> str:
    """The question on the left, its verdict held on the same line at the right."""
    return f"<span class='q'><span>{esc(question)}</span><span class='v'>{verdict_html}</span></span>"


ANSWER_CHARS = 170  # the first screen holds all five answers; the rest of a long one is under "evidence"


def _short(message: str) -> str:
    return message if len(message) <= ANSWER_CHARS else message[:ANSWER_CHARS].rsplit(" ", 1)[0] + " …"


def _full(message: str) -> str:
    return "" if len(message) <= ANSWER_CHARS else f"<div>{esc(message)}</div>"


def _evidence(evidence) -> str:
    if not evidence:
        return "none recorded"

    def flat(value):
        if isinstance(value, float):
            return fmt(value, ".4g")
        if isinstance(value, list):
            return "[" + ", ".join(flat(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {flat(v)}" for k, v in value.items()) + "}"
        return str(value)

    return flat(evidence)


def ladder_section(record: ExperimentRecord, baseline: ExperimentRecord | None) -> str:
    caption = (
        "Mean abs-diff per rung after the warm-up with its 95% interval, coloured by the class the judge decided; arrows run from "
        "parent to child; the fp32 and near-aligned floors are the measured means of those rungs, drawn only where this record has them."
    )
    missing = [name for name in ("fp32-floor", "near-aligned") if all(r.rung != name for r in record.rungs)]
    if missing:
        caption += f" Not in this record: {', '.join(missing)}."
    return f"<section><h2>Ladder</h2>{ladder_svg(record, baseline)}<p class='small'>{esc(caption)}</p></section>"


def _ruled_out_note(rung: Rung) -> str:
    """What the evidence rules out, when the class is undecided (else the class says it)."""
    ruled_out = rung.ruled_out
    if rung.decided_class not in ("undetermined", "undecided") or not ruled_out:
        return ""
    return f"<br><small>not {esc(', not '.join(sorted(ruled_out)))}</small>"


def rungs_table(record: ExperimentRecord, baseline: ExperimentRecord | None) -> str:
    rungs = record.rungs
    if not rungs:
        return "<h2>Rung judgements</h2><p class='none'>no rung judged in this record</p>"
    base = {(r.stage, r.rung): r for r in baseline.rungs} if baseline else {}
    headers = ["Stage", "Rung", "Parent", "Mean [CI]", "Δ vs parent [CI]", "Decided class", "Expected", "Observed", "Test"]
    if baseline:
        headers += ["Baseline record class", "Δ mean vs baseline record", "Change"]
    body = []
    for r in rungs:
        cells = [
            esc(r.stage),
            esc(r.rung),
            esc(r.parent or "— (root)"),
            f"{fmt(r.mean)} {interval(r.ci)}",
            f"{fmt(r.delta, '.3g', True)} {interval(r.delta_ci, True)}",
            esc(r.decided_class) + _ruled_out_note(r),
            esc(f"{' or '.join(str(c) for c in r.expected_class)}, {r.expected_direction or '— (root)'}")
            + (esc(f"; rules out {', '.join(r.expected_ruled_out)}") if r.expected_ruled_out else ""),
            esc(r.observed_direction),
            f"{badge(record.outcome(r.test))} {test_cell(r.test)}",
        ]
        if baseline:
            other = base.get((r.stage, r.rung))
            if other is None:
                cells += ["<span class='none'>not in baseline record</span>", "—", "—"]
            else:
                delta, verdict = compare_verdict(r, other, "mean", "ci")
                cells += [esc(other.decided_class), delta, esc(verdict)]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<h2>Rung judgements</h2><table id='rungs'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def answers_section(record: ExperimentRecord) -> str:
    """Every judged answer with its margin in standard errors; expected answers under the record's
    min_margin_se are flagged (harness.report.answers). The count of expected against reported answers
    and the pre-registration hash head it; answers left for named reports follow in their own table."""
    from harness.report.answers import answer_counts, is_flagged, margin_text, sample_text

    answers = record.answers
    prereg = record.preregistration or {}
    registered = (
        f"Pre-registration: every expectation and threshold this session applied hashes to sha256 "
        f"{prereg['sha256']} (harness.judge.preregistration), recorded before any answer was judged."
        if prereg.get("sha256")
        else "Pre-registration: not recorded (a record written before expectations were hashed)."
    )
    if not answers:
        return f"<h2>Answers and margins</h2><p class='small' id='preregistration'>{esc(registered)}</p><p class='none'>no margins in this record (recorded before margins were kept)</p>"
    minimum = record.min_margin_se if record.min_margin_se is not None else 3.0
    counts = answer_counts(answers)
    main = [a for a in answers if a.report is None]
    flagged = sum(1 for a in main if is_flagged(a, minimum))
    body = []
    for a in main:
        flag = is_flagged(a, minimum)
        cells = [
            esc(a.key),
            esc(a.expected or "—"),
            esc(a.observed),
            f"<span class='{'fail' if flag else ''}'>{esc(margin_text(a.margin))}</span>" + (f" <b>under {minimum:g}</b>" if flag else ""),
            esc(sample_text(a.margin)),
            f"{badge(record.outcome(a.test))}",
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("Answer", "Expected", "Observed", "Margin (SE)", "Sample", "Test"))
    lead = (
        f"Margin: how many standard errors past the point where its decision would flip the estimate stands (for an "
        f"interval-decided answer, past its interval's own t), positive on the side of the answer given. "
        f"{counts['expected']} expected of {counts['answers']} answers; {flagged} under {minimum:g} SE; "
        f"{counts['in_named_reports']} left for named reports (below, with why)."
    )
    reported = sorted((a for a in answers if a.report is not None), key=lambda a: (a.report, a.key))
    named = ""
    if reported:
        rows = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in (a.report, a.key, a.observed, margin_text(a.margin), a.note)) + "</tr>" for a in reported
        )
        named = (
            "<h3>Named reports</h3><p class='small'>Answers outside the main job's: judged and shown, never a pass "
            "(knobs/reports.yaml says what each report holds).</p><table id='named-reports'><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in ("Report", "Answer", "Observed", "Margin (SE)", "Why not held"))
            + f"</tr></thead><tbody>{rows}</tbody></table>"
        )
    return (
        f"<h2>Answers and margins</h2><p class='small' id='preregistration'>{esc(registered)}</p><p class='small'>{esc(lead)}</p>"
        f"<table id='answers'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{named}"
    )


def tokens_section(record: ExperimentRecord) -> str:
    boundary = (
        "<p><b>Boundary table</b> (the seven probes): <span class='none'>not recorded</span> in the experiment record; "
        "<code>python -m harness attribute RUN_DIR</code> prints it for a run.</p>"
    )
    worst = record.worst_tokens
    if worst is None or not worst.rows:
        return f"<h2>Boundary and worst tokens</h2>{boundary}<p><b>Worst tokens</b>: <span class='none'>not recorded</span> (the baseline run has no token dumps, or the A/B tests did not run).</p>"
    columns = list(dict.fromkeys(k for row in worst.rows for k in row))
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td class='num'>{fmt(row.get(c)) if isinstance(row.get(c), float) else esc(row.get(c))}</td>" for c in columns) + "</tr>"
        for row in worst.rows
    )
    return (
        f"<h2>Boundary and worst tokens</h2>{boundary}<p><b>Worst tokens</b> of the baseline run {esc(worst.run_id)} "
        f"({esc(worst.rung)}), largest |dlogp| first:</p><div class='scroll'><table id='worst'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def environment_section(record: ExperimentRecord) -> str:
    envs = record.environment
    parts = [f"<p class='small'>pytest session: <code>{esc(' '.join(record.session.argv))}</code></p>"]
    if not envs:
        parts.append("<p class='none'>no environment recorded (no baseline run in this record)</p>")
    for env in envs:
        harness = env.harness or HarnessCommit()
        hardware = env.hardware or Hardware()
        cpu, gpus = hardware.cpu or Cpu(), hardware.gpus or Gpus()
        versions = env.versions or {}
        version_text = ", ".join(f"{k} {v.version if isinstance(v, Package) else v}" for k, v in versions.items()) or "not recorded"
        container = env.container or Container()
        vime = env.vime or Vime()
        rows = [
            ("Run", f"{env.run_id} ({env.stage}:{env.rung}, {env.mode}, {env.backend})"),
            ("Run directory", env.run_dir),
            ("Harness commit", f"{harness.commit or 'not recorded'}{' (uncommitted changes)' if harness.dirty else ''}"),
            ("VIME commit", vime.commit or vime.note or "not recorded"),
            ("Image", container.image or container.note or "not recorded"),
            (
                "Hardware",
                f"{cpu.model}, {cpu.cores} cores, {cpu.memory_gib} GiB; GPUs: {gpus.count} {gpus.models or gpus.note or ''}",
            ),
            ("Libraries", version_text),
            ("Spec hash", env.spec_hash),
        ]
        table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        argv = "\n".join(env.argv) or "not recorded"
        parts.append(
            f"<h3 style='font-size:13px;margin:8px 0 4px'>{esc(env.label)}</h3><table>{table}</table>"
            f"<details><summary>exact argv ({len(env.argv)} items)</summary><pre>{esc(argv)}</pre></details>"
        )
    return "<h2>Environment</h2>" + "".join(parts)


def allure_section(record: ExperimentRecord) -> str:
    outcomes = record.outcomes
    titles = {}
    for entries in (record.rungs, record.ab, record.rows):
        for entry in entries:
            test = entry.test
            if test is not None and test.nodeid not in titles:
                titles[test.nodeid] = test.title or test.name
    items = "".join(
        f"<li>{badge(outcomes.get(n))} <a href='{allure_href(t)}'>{esc(t)}</a> <span class='small'>{esc(n)}</span></li>" for n, t in titles.items()
    )
    return (
        f"<h2>Into the Allure report</h2><p class='small'>The Allure report (<a href='{ALLURE_INDEX}'>{ALLURE_INDEX}</a>) holds each test's "
        f"plots, run record, spec and log; find a test there by the title below.</p><ul>{items}</ul>"
    )


def render_page(record: ExperimentRecord, baseline: ExperimentRecord | None = None, test_ids: dict[str, str] | None = None) -> str:
    _ALLURE_IDS.clear()
    _ALLURE_IDS.update(test_ids or {})
    top = f"<div class='row2'>{ladder_section(record, baseline)}{ab_section(record, baseline)}</div>"
    body = "".join(
        [
            headline(record, baseline),
            summary_table(record, baseline),
            top,
            rungs_table(record, baseline),
            budget_section(record),
            readiness_section(record),
            candidate_section(record),
            answers_section(record),
            tokens_section(record),
            environment_section(record),
            allure_section(record),
        ]
    )
    title = "Experiment record" + (" (compare)" if baseline else "")
    return f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>"


def write_page(record: ExperimentRecord, out: str | Path, baseline: ExperimentRecord | None = None, test_ids: dict[str, str] | None = None) -> Path:
    from harness.records.atomic import atomic_write_text

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render_page(record, baseline, test_ids)
    atomic_write_text(out, page)
    return out
