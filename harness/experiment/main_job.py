"""The main job as a list of checks, and the command line's way through it.

The main job is the Makefile's baseline selection (`-m "p1 or acceptance or (p3 and ab)"`): the
A/B gate at P3 (its contract, its questions, the candidate's execution, for the pair and each
further candidate of knobs/ab.yaml, and colocate against non-colocate), the acceptance criteria,
and the P1 ladder. `main_job_checks` lists them in pytest's order under the node ids pytest gives
them, each with the Session method that decides it; pytest's items ask the same methods
(tests/ladder, tests/ab, tests/acceptance), so a record written here and one written by pytest on
the same runs compare answer for answer (tests/experiment). The tests of the selection that are
not answers of the experiment are listed in NOT_JUDGED_HERE, with the reason.

`run_main_job` is `python -m harness baseline`: the planned runs launched (or found) first, then
every check decided; `write_outputs` writes the record, summary and page the pytest session writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.experiment.plan import selection_requests
from harness.experiment.provision import Provision
from harness.experiment.runs import RunSource
from harness.experiment.session import Session, rung_cases
from harness.judge import ab
from harness.spec import Knobs
from harness.spec.cluster import skip_reason

LADDER_TEST = "tests/ladder/test_ladder.py::test_rung_against_parent"
ACCEPTANCE_TEST = "tests/acceptance/test_acceptance.py::test_criterion"
AB_TESTS = "tests/ab/test_ab_gate.py"
EXECUTED_TEST = "tests/ab/test_candidate_executed.py::test_candidate_executed_on_both_engines"
BUDGET_TEST = "tests/attribution/test_drift_budget.py::test_drift_budget"
READINESS_TEST = "tests/acceptance/test_readiness.py::test_readiness"
# Tests of the main job's selection that are not answers of the experiment (node id prefixes), and
# why: a reader of the command's answer must not take it for the whole session's.
NOT_JUDGED_HERE = {
    "tests/embedded/test_true_on_policy.py": "bitwise true-on-policy checks of the shared kernels and launched runs; they record no answer",
    "tests/ab/test_candidate_executed.py::test_a_candidate_requested_but_not_counted_is_not_executed": (
        "a test of the execution judge on the A/B's real records (a zeroed count must read 'not executed'), not an answer"
    ),
}


def is_main_job_check(nodeid: str) -> bool:
    """A node id of one of the Session's checks (at any stage), as pytest names it."""
    prefixes = (LADDER_TEST, ACCEPTANCE_TEST, f"{AB_TESTS}::", EXECUTED_TEST, BUDGET_TEST, READINESS_TEST)
    return nodeid.startswith(prefixes) and not any(nodeid.startswith(prefix) for prefix in NOT_JUDGED_HERE)


def main_job_checks(knobs: Knobs, backend: str, mode: str = "colocate", stage: str = "p1") -> list[tuple[str, str | None, tuple]]:
    """The main job's checks in pytest's order (tests/ab, tests/acceptance, tests/ladder): (node id,
    the Session method that decides it or None when its test is skipped on this backend, its arguments)."""
    checks: list[tuple[str, str | None, tuple]] = []
    candidates = [("pair", None, True)] + [(name, name, backend in c.backends) for name, c in knobs.ab.candidates.items()]
    for param, name, runs_here in candidates:
        checks.append((f"{EXECUTED_TEST}[{param}]", "candidate_executed" if runs_here else None, (name,)))
    checks.append((f"{AB_TESTS}::test_same_workload_contract", "ab_contract", (None,)))
    checks += [(f"{AB_TESTS}::test_question[{question}]", "ab_question", (question, None)) for question in sorted(ab.QUESTIONS)]
    for name, candidate in knobs.ab.candidates.items():
        runs_here = backend in candidate.backends
        checks.append((f"{AB_TESTS}::test_further_candidate_same_workload_contract[{name}]", "ab_contract" if runs_here else None, (name,)))
        for question in sorted(ab.QUESTIONS):
            nodeid = f"{AB_TESTS}::test_further_candidate_question[{name}-{question}]"
            checks.append((nodeid, "ab_question" if runs_here else None, (question, name)))
    checks.append((f"{AB_TESTS}::test_consistent_between_colocate_and_non_colocate", "mode_consistency", ()))
    checks += [(f"{ACCEPTANCE_TEST}[{criterion.id}]", "criterion", (criterion,)) for criterion in knobs.acceptance.criteria]
    if knobs.readiness is not None:  # ready for Blackwell operator work? (harness.judge.readiness)
        checks += [(f"{READINESS_TEST}[{criterion.id}]", "readiness", (criterion,)) for criterion in knobs.readiness.criteria]
    for case in rung_cases(knobs, mode, backend):
        if case.stage == stage:
            checks.append((f"{LADDER_TEST}[{case.id}]", None if skip_reason(knobs, case.rung, backend) else "rung", (case,)))
    if knobs.levers is not None and knobs.levers.budget.stage == stage:  # where the drift lives (harness.judge.budget)
        checks += [(f"{BUDGET_TEST}[{rung_id}]", "budget", (rung_id,)) for rung_id in knobs.levers.budget.rungs]
    return checks


def judge_main_job(runs: Provision, knobs: Knobs, mode: str = "colocate", stage: str = "p1") -> Session:
    """Every check of main_job_checks decided on the runs `runs` gives."""
    session = Session(knobs, runs, mode)
    for nodeid, method, args in main_job_checks(knobs, runs.backend, mode, stage):
        if method is None:
            session.outcomes[nodeid] = "skipped"
            continue
        session.decide(nodeid, method, *args)
        runs.between_checks()
    return session


def run_main_job(source: RunSource, knobs: Knobs, mode: str = "colocate", stage: str = "p1") -> Session:
    """`python -m harness baseline` (and `judge` on a find-only source): the planned runs launched in
    the background (harness.experiment.provision), every check decided as its runs are ready."""
    runs = Provision(source)
    runs.start_plan(selection_requests(knobs, source.spec, mode, source.backend, [stage], with_ab=True, seed_offset=source.seed_offset))
    try:
        return judge_main_job(runs, knobs, mode, stage)
    finally:
        runs.stop_plan()


def print_outcomes(session: Session) -> dict[str, int]:
    """One line per check, then why it was skipped (the first line) or failed (every line: the first is
    the judgement, the findings that failed it follow); the counts."""
    for nodeid, outcome in session.outcomes.items():
        why = session.messages.get(nodeid, "")
        shown = why.splitlines() if outcome == "failed" else why.splitlines()[:1]
        print(f"{outcome.upper():7} {nodeid}" + "".join(f"\n        {line.strip()}" for line in shown))
    counts = {o: list(session.outcomes.values()).count(o) for o in ("passed", "failed", "skipped")}
    print(", ".join(f"{n} {o}" for o, n in counts.items()))
    for path, why in NOT_JUDGED_HERE.items():
        print(f"not judged here: {path} ({why})")
    return counts


def write_outputs(session: Session, out: Path, options: dict, front_end: str) -> Path:
    """The experiment record, the summary table and the experiment page of a decided session; the page's path."""
    from harness.report.answers import render_markdown as render_answers
    from harness.report.command import build_experiment_page
    from harness.report.experiment_record import FOLDER, add_entry, new_record, write_record
    from harness.report.summary import write_summary

    shown = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if k not in ("func", "command")}
    record = new_record(argv=["python", "-m", "harness", *sys.argv[1:]], options={**shown, "front_end": front_end})
    for kind, entry in session.entries:
        add_entry(record, kind, entry)
    record.min_margin_se = minimum = float(session.knobs.threshold("min_margin_se"))
    record.preregistration = session.preregistration
    record.outcomes = recorded_outcomes(record, session.outcomes)
    record_dir = write_record(record, out / FOLDER).parent
    if session.rows:
        write_summary(session.rows, out, render_answers(record.answers, minimum) if record.answers else "")
    return build_experiment_page(record_dir, record_dir / "index.html")


def recorded_outcomes(record, outcomes: dict[str, str]) -> dict[str, str]:
    """The outcomes a record keeps: every check of the main job the session ran, and every test that
    made one of the record's entries ("not reported" when its outcome never came)."""
    from harness.report.experiment_record import tested_nodeids

    kept = tested_nodeids(record) | {nodeid for nodeid in outcomes if is_main_job_check(nodeid)}
    return {nodeid: outcomes.get(nodeid, "not reported") for nodeid in sorted(kept)}
