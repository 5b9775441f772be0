"""The main job's selection judged without pytest: `judge_main_job(source, knobs, mode)`.

The selection is the Makefile's baseline (`-m "p1 or acceptance or (p3 and ab)"`): the P1 ladder
(every rung against its parent, or the smoke check where its parent does not run), the acceptance
criteria, and the P3 A/B gate (the pair, each further candidate of knobs/ab.yaml, and colocate vs
non-colocate). Each check is judged as its test judges it (tests/ladder, tests/acceptance,
tests/ab: the same judge functions, the same expectations) and recorded through the same
Recorder, under the test's node id, so a record written here and one written by pytest on the
same runs compare entry by entry (`python -m harness report --compare`). A check whose runs are
not in the source fails with the lookup's line; nothing is launched by a find-only source.
Tests of the selection not judged here are listed in NOT_JUDGED_HERE, with the reason; the command
names them under its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.experiment.evidence import Probes, acceptance_context, family_levels, judge_ladder_rung, replicate_sets
from harness.experiment.plan import ab_replicates
from harness.experiment.recorder import Recorder
from harness.experiment.runs import RunSource
from harness.judge import ab
from harness.judge.acceptance import CHECKS, JudgeContext, abs_diff_present_every_step
from harness.judge.ladder import bound_findings, expectation_findings, family_members
from harness.spec import Knobs, SpecError
from harness.spec.cluster import skip_reason
from harness.spec.schema import Rung

LADDER_TEST = "tests/ladder/test_ladder.py::test_rung_against_parent"
ACCEPTANCE_TEST = "tests/acceptance/test_acceptance.py::test_criterion"
AB_TESTS = "tests/ab/test_ab_gate.py"
# Tests of the main job's selection this module does not judge, and why (a reader of the command's
# answer must not take it for the whole session's; tests/experiment holds the two lists to pytest's).
NOT_JUDGED_HERE = {
    "tests/embedded/test_true_on_policy.py": "bitwise true-on-policy checks on launched runs; they record nothing",
    "tests/ab/test_candidate_executed.py": "the candidate-execution check (operator call counts): not yet judged by this command",
}


@dataclass(frozen=True)
class RungCase:
    """One ladder check: a rung at a stage, in a mode, on a backend."""

    stage: str
    rung: Rung
    mode: str
    backend: str

    @property
    def id(self) -> str:
        return f"{self.stage}-{self.rung.id}"


def rung_cases(knobs: Knobs, mode: str, backend: str) -> list[RungCase]:
    """Every rung x stage in this mode, including those the backend cannot run, ordered by stage,
    then depth in the ladder (roots first), then id."""
    cases = [RungCase(stage, rung, mode, backend) for rung in knobs.rungs.values() for stage in rung.stages if mode in knobs.stages[stage].modes]
    return sorted(cases, key=lambda c: (c.stage, len(knobs.chain(c.rung.id)), c.rung.id))


class Failed(Exception):
    """A check's expectation does not hold (its test would fail), with the line that says why."""


class Skipped(Exception):
    """A check that does not apply to this session (its test would be skipped)."""


@dataclass
class Session:
    """The judged checks' rows, record entries and outcomes, in the order they were judged."""

    knobs: Knobs
    source: RunSource
    mode: str
    rows: list = field(default_factory=list)
    entries: list = field(default_factory=list)  # [(kind, entry)]
    outcomes: dict = field(default_factory=dict)  # node id -> passed / failed / skipped
    messages: dict = field(default_factory=dict)  # node id -> why it failed or was skipped

    def __post_init__(self):
        self.backend = self.source.backend
        self.probes = Probes(self.knobs)
        self._families: dict = {}

    def recorder(self, nodeid: str) -> Recorder:
        return Recorder(self.knobs, self.backend, self.rows.append, lambda kind, entry: self.entries.append((kind, entry)), nodeid)

    def check(self, nodeid: str, judge, *args) -> None:
        """Run one check; its outcome as pytest would report it."""
        try:
            judge(self.recorder(nodeid), *args)
            self.outcomes[nodeid] = "passed"
        except Skipped as why:
            self.outcomes[nodeid], self.messages[nodeid] = "skipped", str(why)
        except (Failed, SpecError) as why:
            self.outcomes[nodeid], self.messages[nodeid] = "failed", str(why)

    def fetch(self, stage: str):
        return self.source.fetcher(stage, self.mode)

    # ------------------------------------------------------------------ the ladder
    def rung(self, record: Recorder, case: RungCase) -> None:
        """tests/ladder/test_ladder.py::test_rung_against_parent, without pytest."""
        stage, rung, fetch = case.stage, case.rung, self.fetch(case.stage)
        if rung.parent is not None and rung.id not in family_members(self.knobs, stage, self.backend):
            return self.smoke(record, stage, rung, fetch(rung.id))
        replicates = self.knobs.stages[stage].replicate_count(self.backend)
        sides = [rung_id for rung_id in (rung.id, rung.parent) if rung_id is not None]
        for rung_id, runs in zip(sides, replicate_sets(sides, fetch, replicates)):
            for run in runs:
                _require_finished(run, f"{rung_id} at {stage} (seed {run.spec.flag('seed')})")
        holm = None
        if rung.parent is not None:
            if stage not in self._families:
                self._families[stage] = family_levels(self.knobs, stage, self.backend, fetch)
            holm = self._families[stage][rung.id]
        judgement = judge_ladder_rung(rung, self.knobs, fetch, self.probes, holm=holm, replicates=replicates, backend=self.backend)
        run = fetch(rung.id)
        parent = fetch(rung.parent) if rung.parent and stage in self.knobs.rungs[rung.parent].stages else None
        record.audit_delta(judgement, run, parent)
        record.rung(case, judgement, run, parent)
        if judgement.problems:
            raise Failed("; ".join(judgement.problems))
        findings = expectation_findings(rung, judgement, run, self.knobs)
        if findings:
            raise Failed(judgement.summary() + "\n  " + "\n  ".join(findings))

    def smoke(self, record: Recorder, stage: str, rung: Rung, run) -> None:
        """A rung whose parent does not run at this stage: the run finished, abs-diff at every step, its own bounds."""
        record.smoke(stage, rung, run)
        _require_finished(run, f"{rung.id} at {stage}")
        verdict = abs_diff_present_every_step(JudgeContext(run=run, knobs=self.knobs))
        findings = ([] if verdict.passed else [verdict.message]) + bound_findings(rung, run, self.knobs)
        if findings:
            raise Failed("\n  ".join(findings))

    # ------------------------------------------------------------------ acceptance
    def criterion(self, record: Recorder, criterion) -> None:
        """tests/acceptance/test_acceptance.py::test_criterion, without pytest."""
        judged = self.knobs.acceptance.judges
        stage, rung = judged["stage"], judged["rung"]
        if self.mode not in self.knobs.stages[stage].modes:
            raise Skipped(f"the judged stage {stage} runs {', '.join(self.knobs.stages[stage].modes)} only, not --mode={self.mode}")
        run = self.source(stage, rung, self.mode)
        verdict = CHECKS[criterion.check](acceptance_context(run, self.knobs, self.fetch(stage), criterion.check))
        record.criterion(criterion, run, verdict)
        if criterion.expect != "not-expected" and not verdict.passed:
            raise Failed(f"{criterion.seed_text}\n  -> {verdict.message}")

    # ------------------------------------------------------------------ the A/B gate
    def ab_sides(self, candidate_flags: dict | None = None):
        """(pair, sides): the pair (baseline, candidate) and both at every replicate seed; with
        `candidate_flags` the candidate is the baseline rung with those flags (knobs/ab.yaml candidates)."""
        chosen, fetch = self.knobs.ab.pair, self.fetch(self.knobs.ab.pair.stage)
        count = ab_replicates(self.knobs, self.backend)
        if candidate_flags is None:
            pair = (fetch(chosen.baseline), fetch(chosen.candidate))
            return pair, tuple(replicate_sets([chosen.baseline, chosen.candidate], fetch, count))
        pair = (fetch(chosen.baseline), fetch(chosen.baseline, **candidate_flags))
        return pair, tuple(replicate_sets([chosen.baseline, (chosen.baseline, candidate_flags)], fetch, count))

    def ab_contract(self, record: Recorder, name: str | None) -> None:
        pair, _ = self.ab_sides(self._candidate_flags(name))
        record.ab_rows(pair, name=name, notes=ab.cost_note(*pair, self.knobs) if name else "")
        contract = ab.contract_problems(*pair, self.knobs)
        changed = "; ".join(ab.what_changed(*pair, self.knobs))
        message = "; ".join(contract) or ("same workload" + (f"; the candidate changes {changed}" if changed else ""))
        record.ab("same-workload contract", pair, passed=not contract, message=message, key=f"{name}:contract" if name else "contract")
        if contract:
            raise Failed("A/B rejected:\n  " + "\n  ".join(contract))

    def ab_question(self, record: Recorder, question: str, name: str | None) -> None:
        """tests/ab/test_ab_gate.py's _check_question, without pytest."""
        pair, sides = self.ab_sides(self._candidate_flags(name))
        contract = ab.contract_problems(*pair, self.knobs)
        if contract:
            raise Failed(f"not judged: the A/B is rejected ({contract[0]})")
        answer = ab.QUESTIONS[question](*sides, self.knobs)
        gate = self.knobs.ab.gated_on.get(question)
        expected, why = self.knobs.ab.expected_to_pass(question, self.backend, name)
        shown = expected if expected == "not-expected" else ("yes" if expected else "no (flat)")
        if gate is not None and self.backend not in gate.backends and expected is True:
            shown = "not-expected (recorded, not gated on this backend)"
        key = f"{name}:{question}" if name else question
        record.ab(answer.question, pair, passed=answer.passed, message=answer.message, evidence=answer.evidence, key=key, expected=shown)
        where = f"candidates.{name}.expect" if name else "expect"
        if expected == "not-expected":
            return
        if not expected:
            if answer.passed:
                raise Failed(f"{answer.question} passed, but knobs/ab.yaml {where}.{self.backend} says it does not: {why}\n  {answer.message}")
            if answer.evidence.get("outcome") != "flat":
                raise Failed(f"{answer.question}: expected flat (a decided no), got {answer.evidence.get('outcome')}: {answer.message}")
            return
        if gate is not None and self.backend not in gate.backends:
            if "unmeasured" not in answer.evidence or answer.evidence["unmeasured"]:
                raise Failed(f"{answer.question} not measured: {answer.message}")
            return
        if not answer.passed:
            raise Failed(f"{answer.question} {answer.message}")

    def mode_consistency(self, record: Recorder) -> None:
        chosen = self.knobs.ab.pair
        modes = ("colocate", "non-colocate")
        runs = self.source.many([(chosen.stage, rung, mode, {}) for mode in modes for rung in (chosen.baseline, chosen.candidate)])
        pairs = {mode: (runs[2 * k], runs[2 * k + 1]) for k, mode in enumerate(modes)}
        rejected = {mode: ab.contract_problems(*p, self.knobs) for mode, p in pairs.items()}
        if any(rejected.values()):
            raise Failed(f"A/B rejected: {rejected}")
        answer = ab.mode_consistency(pairs, self.knobs)
        expected, _ = self.knobs.ab.expected_to_pass("mode-consistency", self.backend)
        shown = "not-expected" if expected == "not-expected" else "yes (consistent)"
        evidence = answer.evidence
        record.ab(
            answer.question,
            pairs["colocate"],
            passed=answer.passed,
            message=answer.message,
            evidence=evidence,
            key="mode-consistency",
            expected=shown,
        )
        if expected != "not-expected" and not answer.passed:
            raise Failed(f"{answer.question} {answer.message}")

    def _candidate_flags(self, name: str | None) -> dict | None:
        return None if name is None else dict(self.knobs.ab.candidates[name].set)


def _require_finished(run, what: str) -> None:
    state = run.status.state if run.status else "unknown"
    if state != "finished":
        failure = run.status.failure if run.status else None
        raise Failed(
            f"{what}: run {run.id} is {state}" + (f" ({failure.signature} at log.txt line {failure.line}: {failure.text})" if failure else "")
        )


def main_job_checks(knobs: Knobs, backend: str, mode: str = "colocate", stage: str = "p1") -> list[tuple[str, str | None, tuple]]:
    """The main job's checks in pytest's order (tests/ab, tests/acceptance, tests/ladder): (node id,
    the Session method that judges it or None when its test is skipped on this backend, its arguments)."""
    checks: list[tuple[str, str | None, tuple]] = [(f"{AB_TESTS}::test_same_workload_contract", "ab_contract", (None,))]
    checks += [(f"{AB_TESTS}::test_question[{question}]", "ab_question", (question, None)) for question in sorted(ab.QUESTIONS)]
    for name, candidate in knobs.ab.candidates.items():
        runs_here = backend in candidate.backends
        checks.append((f"{AB_TESTS}::test_further_candidate_same_workload_contract[{name}]", "ab_contract" if runs_here else None, (name,)))
        for question in sorted(ab.QUESTIONS):
            nodeid = f"{AB_TESTS}::test_further_candidate_question[{name}-{question}]"
            checks.append((nodeid, "ab_question" if runs_here else None, (question, name)))
    checks.append((f"{AB_TESTS}::test_consistent_between_colocate_and_non_colocate", "mode_consistency", ()))
    checks += [(f"{ACCEPTANCE_TEST}[{criterion.id}]", "criterion", (criterion,)) for criterion in knobs.acceptance.criteria]
    for case in rung_cases(knobs, mode, backend):
        if case.stage == stage:
            checks.append((f"{LADDER_TEST}[{case.id}]", None if skip_reason(knobs, case.rung, backend) else "rung", (case,)))
    return checks


def judge_main_job(source: RunSource, knobs: Knobs, mode: str = "colocate", stage: str = "p1") -> Session:
    """Every check of main_job_checks judged on the source's runs."""
    session = Session(knobs, source, mode)
    for nodeid, method, args in main_job_checks(knobs, source.backend, mode, stage):
        if method is None:
            session.outcomes[nodeid] = "skipped"
        else:
            session.check(nodeid, getattr(session, method), *args)
    return session
