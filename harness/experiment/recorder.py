"""The experiment record's entries for one judged check, without pytest or Allure.

A `Recorder` turns what a check judged (a rung's judgement, an acceptance verdict, an A/B answer)
into the summary rows and the experiment record's entries (harness.report.experiment_record,
harness.report.answers), handed to two sinks: `record_row(SummaryRow)` and
`record_experiment(kind, entry)`. The pytest fixture (fixtures/experiment.py) subclasses it and
adds the Allure attachments; the Session (harness.experiment.session) uses it as is from the command line.
Both write the same record from the same judgements.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from harness.report import experiment_record as record_entries
from harness.report.answers import answer_entry
from harness.report.summary import summary_row_from_run
from harness.spec import Knobs

_AUDITS: dict = {}  # run id -> its token audit, computed once per process


def audit_of(run):
    """The run's token audit (None without dumps), computed once per process: a parent rung is
    recorded by each of its children."""
    from harness.attribution.audit import audit_run

    if not run.dumps:
        return None
    if run.id not in _AUDITS:
        _AUDITS[run.id] = audit_run(run)
    return _AUDITS[run.id]


def audit_percentiles(run) -> dict | None:
    """The token audit's p50/p90/p99 of |dlogp| (None without dumps)."""
    audit = audit_of(run)
    if audit is None:
        return None
    return {k: getattr(audit, f"rlk_audit_dlogp_abs_{k}") for k in ("p50", "p90", "p99")}


def rung_answer_expected(rung) -> tuple[str | None, bool]:
    """What the rung file pre-registers of the main job's answers, as the answers table shows it (None:
    every answer left for named reports), and whether the direction's margin is the answer's. A rung
    that expects a class but no direction (stale-weights: its class is the framework probes', a check
    without a statistic) is shown without a margin."""
    expect = rung.expect
    parts = ([expect.direction] if expect.direction_expected else []) + ([f"class {expect.drift_class}"] if expect.class_expected else [])
    parts += [f"{drift} ruled out" for drift in expect.rules_out]
    return (", ".join(parts) or None), expect.direction_expected


class Recorder:
    """Summary rows and experiment-record entries of one check (module docstring)."""

    def __init__(
        self,
        knobs: Knobs,
        backend: str,
        record_row: Callable,
        record_experiment: Callable[[str, BaseModel], None] | None = None,
        nodeid: str = "",
        title: str = "",
    ):
        self.knobs, self.backend = knobs, backend
        self.record_summary_row = record_row
        self.record_experiment = record_experiment or (lambda kind, entry: None)
        self.nodeid, self.title = nodeid, title

    def _test(self, title: str) -> record_entries.TestRef:
        self.title = title
        return record_entries.test_ref(self.nodeid, title)

    def _row(self, row, kind: str, title: str, replicates: int = 1) -> None:
        """A summary row: the session's table, and the experiment record with the check that made it."""
        self.record_summary_row(row)
        self.record_experiment("rows", record_entries.row_entry(row, kind, record_entries.test_ref(self.nodeid, title), replicates))

    def criterion(self, criterion, run, verdict) -> None:
        from harness.judge.held import hold_criterion

        held = hold_criterion(criterion, verdict, self.backend)
        observed = (verdict.evidence or {}).get("outcome") or ("pass" if verdict.passed else "fail")
        margin = (verdict.evidence or {}).get("margin")
        test = self._test(criterion.seed_text)
        reported = held.reported.get("answer")
        note = verdict.message if reported is None else f"{reported.reason} Observed: {verdict.message}"
        expected = "pass" if reported is None else None
        entry = answer_entry(
            f"acceptance/{criterion.id}", "acceptance", expected, observed, margin, test, note, reported.report if reported else None
        )
        self.record_experiment("answers", entry)

    def audit_delta(self, judgement, run, parent) -> None:
        """The audit percentiles' rung-minus-parent difference, into the judgement's evidence."""
        audit = {name: audit_percentiles(side) for name, side in (("rung", run), ("parent", parent)) if side is not None}
        if audit.get("rung") and audit.get("parent"):
            judgement.evidence["audit_delta"] = {k: (audit["rung"][k] or 0) - (audit["parent"][k] or 0) for k in ("p50", "p90", "p99")}

    def rung(self, case, judgement, run, parent) -> None:
        """The rung's summary row, its judgement and its answer; a root's environment."""
        notes = f"{case.rung.id}: class {judgement.drift_class}, {judgement.observed_direction}"
        if judgement.replicate_spread():  # the spread between seeds, beside the verdict taken over them
            notes += f"; {judgement.replicate_spread()}"
        paired = judgement.evidence.get("paired_delta") or {}
        if "delta" in paired:  # the same tokens scored by both configurations, beside the trajectories' delta
            notes += f"; paired per-token delta {paired['delta']:+.2g} [{paired['low']:+.2g}, {paired['high']:+.2g}]"
        if judgement.outcome is not None and judgement.outcome.direction == "inconclusive":
            # What one run could not see: a reader must not take it for "no effect".
            notes += f" (smallest detectable effect {judgement.outcome.detectable:.2g}, effect of interest {judgement.outcome.effect:.2g})"
        title = f"{case.rung.title} [{case.stage}]"
        row = summary_row_from_run(run, f"{case.stage}:{case.rung.id}", parent=parent, notes=notes, knobs=self.knobs)
        self._row(row, "rung", title, replicates=(judgement.evidence.get("replicates") or {}).get("count", 1))
        self.record_experiment("rungs", record_entries.rung_entry(case, judgement, row, self._test(title)))
        if case.rung.parent is not None:
            expected, with_margin = rung_answer_expected(case.rung)
            margin = (judgement.evidence.get("decision") or {}).get("margin")
            observed = f"{judgement.observed_direction}, class {judgement.drift_class}"
            if case.rung.expect.rules_out:
                observed += "; ruled out: " + (", ".join(sorted(judgement.ruled_out)) or "nothing")
            test = record_entries.test_ref(self.nodeid, title)
            key = f"ladder/{case.stage}/{case.rung.id}"
            if expected is not None:
                self.record_experiment("answers", answer_entry(key, "ladder", expected, observed, margin if with_margin else None, test))
            for answer, reported in case.rung.expect.reported.items():
                shown = judgement.observed_direction if answer == "direction" else f"class {judgement.drift_class}"
                self.record_experiment(
                    "answers",
                    answer_entry(
                        f"{key}/{answer}", "ladder", None, shown, margin if answer == "direction" else None, test, reported.reason, reported.report
                    ),
                )
        else:  # a ladder root: the configuration everything above it is measured from
            self.record_experiment("environment", record_entries.environment_entry(run, f"ladder root {case.stage}:{case.rung.id}"))

    def budget(self, rung_id: str, budget, expected) -> None:
        """A rung's drift budget (harness.judge.budget), its localisation answer and each ruled-out lever's."""
        from dataclasses import replace

        from harness.judge.budget import RungBudget, answer_margin
        from harness.report.record_model import DriftBudget

        title = f"Drift budget of {rung_id} (where the drift lives, by intervention)"
        test = self._test(title)
        if isinstance(budget, RungBudget):
            entry = DriftBudget(
                rung=rung_id, verdict=budget.verdict, boundary=budget.boundary, reason=budget.reason, data=budget.as_dict(), test=test
            )
            margin = answer_margin(budget)
            observed = budget.verdict + (f" to {budget.boundary}" if budget.boundary else "")
        else:
            reason = getattr(budget, "reason", str(budget))
            entry = DriftBudget(rung=rung_id, verdict="not measured", reason=reason, test=test)
            margin, observed = None, "not measured"
        self.record_experiment("budgets", entry)
        report = expected.report if expected is not None else None
        shown = None if expected is None or report else expected.verdict + (f" to {expected.boundary}" if expected.boundary else "")
        note = entry.reason if not report else f"{expected.reason.strip()} Observed: {entry.reason}"
        self.record_experiment(
            "answers",
            answer_entry(f"budget/{rung_id}", "budget", shown, observed, margin.as_dict() if margin else None, test, note, report=report),
        )
        # Each lever the design rules out is an expected answer of its own, held whether or not the
        # rung's verdict is (budget.expect.<rung>.ruled_out): a record and a sweep count it.
        for lever in expected.ruled_out if expected is not None else ():
            row = budget.lever(lever) if isinstance(budget, RungBudget) else None
            # its margin on the side of "not localised": the lever's own, sign flipped
            ruled = None if row is None or row.margin is None else replace(row.margin, se_units=-row.margin.se_units, answer="not localised")
            self.record_experiment(
                "answers",
                answer_entry(
                    f"budget/{rung_id}/{lever}",
                    "budget",
                    "not localised",
                    row.localisation if row is not None else "not measured",
                    ruled.as_dict() if ruled else None,
                    test,
                    f"aligning {lever} alone removes {row.add.text()} of {rung_id}'s drift" if row is not None else entry.reason,
                ),
            )

    # Which Makefile target's selection decides each kind of answer (its marker): the main job holds the
    # readiness criteria (acceptance), `make candidate` the candidate operator's pairs (candidate).
    TARGETS = {"readiness": "make baseline", "candidate": "make candidate"}

    def readiness(self, criterion, verdict) -> None:
        """One readiness criterion (harness.judge.readiness) and its answer."""
        from harness.report.record_model import Readiness

        test = self._test(criterion.seed_text)
        state = verdict.evidence.get("verdict", "not checked")
        entry = Readiness(
            id=criterion.id,
            seed_text=criterion.seed_text,
            verdict=state,
            expected=criterion.expect,
            message=verdict.message,
            evidence=verdict.evidence,
            target=self.TARGETS["readiness"],
            test=test,
        )
        self.record_experiment("readiness", entry)
        self.record_experiment(
            "answers",
            answer_entry(f"readiness/{criterion.id}", "readiness", criterion.expect, state, None, test, verdict.message, report=criterion.report),
        )

    def candidate_pair(self, answer) -> None:
        """One candidate pair (harness.experiment.candidate_ab.PairAnswer): its entry, its answer, its rows."""
        from harness.experiment.candidate_ab import NEGATIVE_CONTROL, expectation
        from harness.report.record_model import CandidatePair
        from harness.spec.candidate_file import REPORTED

        title = f"Candidate operator A/B: {answer.name}" if answer.name != NEGATIVE_CONTROL else "Candidate operator A/B: negative control"
        test = self._test(title)
        self.record_experiment(
            "candidate", CandidatePair(name=answer.name, label=answer.label, data=answer.as_dict(), target=self.TARGETS["candidate"], test=test)
        )
        expected = expectation(self.knobs, answer.name, self.backend)
        shown = None if expected is None else expected.drift
        report = expected.report if expected is not None and expected.drift == REPORTED else None
        observed = answer.outcome or ("rejected" if answer.contract else "not judged")
        margin = (answer.drift.evidence or {}).get("margin") if answer.drift else None
        self.record_experiment(
            "answers", answer_entry(f"candidate/{answer.name}/drift", "candidate", shown, observed, margin, test, answer.label, report=report)
        )
        if answer.baseline and answer.candidate:
            notes = "; ".join(row.text() for row in answer.performance[:4])
            row = summary_row_from_run(answer.candidate[0], f"candidate {answer.name}", parent=answer.baseline[0], notes=notes, knobs=self.knobs)
            self._row(row, "ab-candidate", title)
            # the commit, machine and software the pair's runs were made with (make candidate's record has no other run)
            self.record_experiment("environment", record_entries.environment_entry(answer.baseline[0], f"candidate pair {answer.name}: baseline"))

    def candidate_mixed_paths(self, answer, bf16, fp8) -> None:
        """The seed's A/B question 4 (harness.judge.candidate_gate.mixed_paths) from two candidate pairs."""
        from harness.report.record_model import CandidatePair

        test = self._test("Does the candidate introduce numerical drift under BF16/FP8 mixed paths?")
        data = {"answer": answer.answer, "message": answer.message, "evidence": answer.evidence, "pairs": {"bf16": bf16.name, "fp8": fp8.name}}
        self.record_experiment(
            "candidate", CandidatePair(name="mixed-paths", label=answer.message, data=data, target=self.TARGETS["candidate"], test=test)
        )
        chosen = self.knobs.candidate.mixed_paths
        expected = chosen.expect.get(self.backend)
        report = chosen.report if expected == "reported" else None
        self.record_experiment(
            "answers", answer_entry("candidate/mixed-paths", "candidate", expected, answer.answer, None, test, answer.message, report=report)
        )

    def smoke(self, stage: str, rung, run) -> None:
        row = summary_row_from_run(run, f"{stage}:{rung.id}", notes="smoke", knobs=self.knobs)
        self._row(row, "smoke", f"{rung.title} [{stage} smoke]")

    def ab(
        self, question: str, pair, *, passed: bool, message: str, evidence: dict | None = None, key: str | None = None, expected=None
    ) -> record_entries.AbAnswer:
        """key: the judge's name for the question (harness.judge.ab.QUESTIONS, "mode-consistency",
        "contract"), so the page can put the answer beside the seed's question."""
        entry = record_entries.ab_entry(key or question, question, pair, passed=passed, message=message, evidence=evidence, test=self._test(question))
        self.record_experiment("ab", entry)
        if expected is not None:  # a judged question (the contract is a check, not an estimate)
            observed = ("yes" if passed else "no") + (f" ({evidence['outcome']})" if (evidence or {}).get("outcome") else "")
            margin = (evidence or {}).get("margin")
            reported = expected.reported.get("answer") if hasattr(expected, "reported") else None
            shown = None if reported is not None else getattr(expected, "expected", expected)
            note = message if reported is None else f"{reported.reason} Observed: {message}"
            self.record_experiment(
                "answers",
                answer_entry(f"ab/{key or question}", "ab", shown, observed, margin, entry.test, note, reported.report if reported else None),
            )
        return entry

    def ab_rows(self, pair, name: str | None = None, notes: str = "") -> None:
        """The pair's baseline and candidate rows; with `name` (a further candidate of knobs/ab.yaml
        candidates) the candidate's row only, labelled with its name: the baseline's row is the pair's."""
        from harness.records.execution_decisions import read_decisions

        baseline, candidate = pair
        mode = candidate.spec.mode or "?"
        title = self.title or "same-workload contract"
        if name is None:
            decisions = read_decisions(baseline.path)[0]
            row = summary_row_from_run(baseline, f"baseline ({mode})", notes="A/B baseline", knobs=self.knobs, execution_decisions=decisions)
            self._row(row, "ab-baseline", title)
        row = summary_row_from_run(
            candidate,
            f"candidate {name} ({mode})" if name else f"candidate ({mode})",
            parent=baseline,
            notes="; ".join(filter(None, ["A/B candidate", notes])),
            knobs=self.knobs,
            execution_decisions=read_decisions(candidate.path)[0],
        )
        self._row(row, "ab-candidate", title)
        if name is not None:
            return
        self.record_experiment("environment", record_entries.environment_entry(baseline, f"A/B baseline ({mode})"))
        audit = audit_of(baseline)
        if audit is not None and audit.worst_tokens:
            self.record_experiment("worst_tokens", record_entries.worst_tokens_entry(baseline, audit))
