"""The main job's checks, decided once: `Session.decide(nodeid, check, *args)`.

A Session holds the experiment (knobs), the runs (any object with RunSource's face: `backend`,
`__call__`, `many`, `fetcher`: the launching or find-only RunSource of the command line, or the
pytest plugin's provider) and a recorder per check. Each check method gathers its evidence,
asks the judge, records what it found, and raises Failed or Skipped when its expectation does not
hold; `decide` turns that into an Outcome. pytest's items (tests/ladder, tests/acceptance, tests/ab)
and the command line (`python -m harness baseline`, `python -m harness judge`: harness.experiment.main_job)
are two front ends that ask the same methods and write the same record: nothing here knows which
one asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.experiment.evidence import (
    Probes,
    acceptance_context,
    contract_problems,
    drift_budget_answer,
    family_levels,
    judge_ladder_rung,
    replicate_sets,
)
from harness.experiment.plan import ab_replicates
from harness.experiment.recorder import Recorder
from harness.judge import ab
from harness.judge.acceptance import CHECKS, JudgeContext, abs_diff_present_every_step
from harness.judge.candidate_execution import judge_pair_execution
from harness.judge.expectations import bound_findings, expectation_findings
from harness.judge.ladder import family_members
from harness.records.metric_names import ABS_DIFF
from harness.records.operator_calls import read_operator_calls
from harness.spec import Knobs, SpecError
from harness.spec.schema import Rung

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


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
    """A check's expectation does not hold, with the line that says why."""


class Skipped(Exception):
    """A check that does not apply to this session."""


@dataclass(frozen=True)
class Outcome:
    state: str  # passed | failed | skipped
    message: str = ""


@dataclass
class Session:
    """The judged checks' rows, record entries and outcomes, in the order they were judged.
    `recorder_for(nodeid)` gives the recorder a check writes through (default: this session's own
    lists, which the command line writes out; pytest adds its Allure attachments)."""

    knobs: Knobs
    runs: object
    mode: str
    recorder_for: Callable[[str], Recorder] | None = None
    rows: list = field(default_factory=list)
    entries: list = field(default_factory=list)  # [(kind, entry)]
    outcomes: dict = field(default_factory=dict)  # node id -> passed / failed / skipped
    messages: dict = field(default_factory=dict)  # node id -> why it failed or was skipped

    def __post_init__(self):
        self.backend = self.runs.backend
        self.probes = Probes(self.knobs)
        self._families: dict = {}
        self._candidate_answers: dict = {}  # pair name -> harness.experiment.candidate_ab.PairAnswer
        if self.recorder_for is None:
            self.recorder_for = self._own_recorder

    def _own_recorder(self, nodeid: str) -> Recorder:
        return Recorder(self.knobs, self.backend, self.rows.append, lambda kind, entry: self.entries.append((kind, entry)), nodeid)

    def decide(self, nodeid: str, check: str, *args) -> Outcome:
        """Run one check (a method of this class, by name) and keep its outcome under `nodeid`."""
        try:
            getattr(self, check)(self.recorder_for(nodeid), *args)
            outcome = Outcome(PASSED)
        except Skipped as why:
            outcome = Outcome(SKIPPED, str(why))
        except (Failed, SpecError) as why:
            outcome = Outcome(FAILED, str(why))
        self.outcomes[nodeid] = outcome.state
        if outcome.message:
            self.messages[nodeid] = outcome.message
        return outcome

    def fetch(self, stage: str):
        return self.runs.fetcher(stage, self.mode)

    # ------------------------------------------------------------------ the ladder
    def rung(self, record: Recorder, case: RungCase) -> None:
        """A rung against its parent: an isolated delta (an interval against the parent, Holm over
        the stage's family), its direction and evidence-decided drift class as its file expects,
        and its own absolute bounds; the smoke check where the parent does not run here."""
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
        """A rung whose parent does not run at this stage (P0: smoke and config validation): the run
        finished, abs-diff at every step, its own bounds."""
        record.smoke(stage, rung, run)
        _require_finished(run, f"{rung.id} at {stage}")
        verdict = abs_diff_present_every_step(JudgeContext(run=run, knobs=self.knobs))
        findings = ([] if verdict.passed else [verdict.message]) + bound_findings(rung, run, self.knobs)
        if findings:
            raise Failed("\n  ".join(findings))

    # ------------------------------------------------------------------ acceptance
    def criterion(self, record: Recorder, criterion) -> None:
        """One of the seed's acceptance criteria on the recommended baseline (knobs/acceptance.yaml judges)."""
        judged = self.knobs.acceptance.judges
        stage, rung = judged["stage"], judged["rung"]
        if self.mode not in self.knobs.stages[stage].modes:
            raise Skipped(f"the judged stage {stage} runs {', '.join(self.knobs.stages[stage].modes)} only, not --mode={self.mode}")
        run = self.runs(stage, rung, self.mode)
        verdict = CHECKS[criterion.check](acceptance_context(run, self.knobs, self.fetch(stage), criterion.check))
        record.criterion(criterion, run, verdict)
        if criterion.expect != "not-expected" and not verdict.passed:
            raise Failed(f"{criterion.seed_text}\n  -> {verdict.message}")

    # ------------------------------------------------------------------ the A/B gate
    def ab_pair(self, name: str | None = None):
        """(baseline, candidate) at the judging seed; with `name` the candidate is the baseline rung
        with that further candidate's flags (knobs/ab.yaml candidates)."""
        chosen, fetch = self.knobs.ab.pair, self.fetch(self.knobs.ab.pair.stage)
        if name is None:
            return fetch(chosen.baseline), fetch(chosen.candidate)
        return fetch(chosen.baseline), fetch(chosen.baseline, **self._candidate_flags(name))

    def ab_sides(self, name: str | None = None):
        """Both sides of the pair at every replicate seed: (baseline runs, candidate runs)."""
        chosen, fetch = self.knobs.ab.pair, self.fetch(self.knobs.ab.pair.stage)
        candidate = chosen.candidate if name is None else (chosen.baseline, self._candidate_flags(name))
        return tuple(replicate_sets([chosen.baseline, candidate], fetch, ab_replicates(self.knobs, self.backend)))

    def ab_contract(self, record: Recorder, name: str | None) -> None:
        """The same-workload contract of the pair (or of a further candidate against the same baseline)."""
        pair = self.ab_pair(name)
        record.ab_rows(pair, name=name, notes=ab.cost_note(*pair, self.knobs) if name else "")
        contract = contract_problems(*pair, self.knobs)
        changed = "; ".join(ab.what_changed(*pair, self.knobs))
        message = "; ".join(contract) or ("same workload" + (f"; the candidate changes {changed}" if changed else ""))
        record.ab("same-workload contract", pair, passed=not contract, message=message, key=f"{name}:contract" if name else "contract")
        if contract:
            raise Failed("A/B rejected:\n  " + "\n  ".join(contract))

    def ab_question(self, record: Recorder, question: str, name: str | None) -> None:
        """One of the gate's questions over every replicate pair, held to knobs/ab.yaml: its expect
        (a decided no where one is expected, or reported only), else its gated_on backends."""
        pair = self.ab_pair(name)
        contract = contract_problems(*pair, self.knobs)
        if contract:
            raise Failed(f"not judged: the A/B is rejected ({contract[0]})")
        answer = ab.QUESTIONS[question](*self.ab_sides(name), self.knobs)
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

    def candidate_executed(self, record: Recorder, name: str | None) -> None:
        """The candidate's operator counted calls and tokens in the trainer's recompute and training
        forward and in vLLM's sampler, inside the calls (operator_calls.json), and the baseline's own
        operators counted too: an operator that never ran reduces nothing."""
        baseline, candidate = pair = self.ab_pair(name)
        calls, problem = read_operator_calls(candidate.path)
        base, base_problem = read_operator_calls(baseline.path)
        verdict = judge_pair_execution(
            calls, problem, base, base_problem, candidate_rollouts=_rollouts_logged(candidate), baseline_rollouts=_rollouts_logged(baseline)
        )
        key = f"{name}:candidate-executed" if name else "candidate-executed"
        record.ab("candidate executed", pair, passed=verdict.passed, message=verdict.message, evidence=verdict.evidence, key=key)
        if not verdict.passed:
            raise Failed(verdict.message)

    def mode_consistency(self, record: Recorder) -> None:
        """The pair's answers in colocate and non-colocate, compared (the seed's fifth question)."""
        chosen = self.knobs.ab.pair
        modes = ("colocate", "non-colocate")
        runs = self.runs.many([(chosen.stage, rung, mode, {}) for mode in modes for rung in (chosen.baseline, chosen.candidate)])
        pairs = {mode: (runs[2 * k], runs[2 * k + 1]) for k, mode in enumerate(modes)}
        rejected = {mode: contract_problems(*p, self.knobs) for mode, p in pairs.items()}
        if any(rejected.values()):
            raise Failed(f"A/B rejected: {rejected}")
        answer = ab.mode_consistency(pairs, self.knobs)
        expected, _ = self.knobs.ab.expected_to_pass("mode-consistency", self.backend)
        shown = "not-expected" if expected == "not-expected" else "yes (consistent)"
        record.ab(
            answer.question,
            pairs["colocate"],
            passed=answer.passed,
            message=answer.message,
            evidence=answer.evidence,
            key="mode-consistency",
            expected=shown,
        )
        if expected != "not-expected" and not answer.passed:
            raise Failed(f"{answer.question} {answer.message}")

    # ------------------------------------------------------------------ the drift budget
    # Wiring of harness.judge.budget into the main job: one step, one call (drift_budget_answer).
    def budget(self, record: Recorder, rung_id: str) -> None:
        """Where a budget rung's drift lives, by intervention (knobs/levers.yaml): its runs re-scored
        under each lever, the drift shared out and localised, held to its pre-registered answer."""
        stage = self.knobs.levers.budget.stage
        if self.mode not in self.knobs.stages[stage].modes:
            raise Skipped(f"the budget's stage {stage} runs {', '.join(self.knobs.stages[stage].modes)} only, not --mode={self.mode}")
        replicates = self.knobs.stages[stage].replicate_count(self.backend)
        budget, expected, findings = drift_budget_answer(rung_id, self.knobs, self.fetch(stage), self.probes, replicates)
        record.budget(rung_id, budget, expected)
        if findings:
            raise Failed(f"drift budget of {rung_id}: " + "; ".join(findings))

    # ------------------------------------------------------------------ ready for operator work?
    # Wiring of harness.judge.readiness into the main job: one step, one call (readiness_answer).
    def readiness(self, record: Recorder, criterion) -> None:
        """One of the seed's readiness criteria (knobs/readiness.yaml), on runs the main job makes anyway."""
        from harness.experiment.readiness import readiness_answer

        stage = self.knobs.readiness.stage
        if self.mode not in self.knobs.stages[stage].modes:
            raise Skipped(f"the readiness stage {stage} runs {', '.join(self.knobs.stages[stage].modes)} only, not --mode={self.mode}")
        verdict = readiness_answer(criterion, self.knobs, self.runs, self.mode, self.probes)
        record.readiness(criterion, verdict)
        state = verdict.evidence.get("verdict")
        if criterion.expect != "not-expected" and state != criterion.expect:
            raise Failed(
                f"{criterion.seed_text}\n  expected {criterion.expect} (knobs/readiness.yaml: {criterion.design.strip()})\n  -> {verdict.message}"
            )

    # ------------------------------------------------------------------ the candidate operator (make candidate)
    def candidate_pair(self, record: Recorder, name: str) -> None:
        """One pair of knobs/candidate.yaml (or its negative control) through the gate, held to its expectation."""
        answer = self._candidate_answer(name)
        record.candidate_pair(answer)
        if answer.contract:
            raise Failed("A/B rejected:\n  " + "\n  ".join(answer.contract))
        if answer.findings:
            raise Failed(f"{answer.label}\n  " + "\n  ".join(answer.findings))

    def candidate_mixed_paths(self, record: Recorder) -> None:
        """The seed's A/B question 4 from the candidate's bf16 and fp8 pairs."""
        from harness.experiment.candidate_ab import judge_mixed_paths

        chosen = self.knobs.candidate.mixed_paths
        answers = {name: self._candidate_answer(name) for name in (chosen.bf16, chosen.fp8)}
        answer, findings = judge_mixed_paths(self.knobs, answers, self.backend)
        record.candidate_mixed_paths(answer, answers[chosen.bf16], answers[chosen.fp8])
        if findings:
            raise Failed("\n  ".join(findings))

    def _candidate_answer(self, name: str):
        """A candidate pair's runs gathered and judged once per session (the mixed-paths answer reuses them)."""
        from harness.experiment.candidate_ab import gather, judge_pair, replicates

        if name not in self._candidate_answers:
            baseline, candidate = gather(self.knobs, name, self.fetch, replicates(self.knobs, self.backend))
            self._candidate_answers[name] = judge_pair(name, self.knobs, baseline, candidate, self.backend)
        return self._candidate_answers[name]

    def _candidate_flags(self, name: str | None) -> dict | None:
        return None if name is None else dict(self.knobs.ab.candidates[name].set)


def _require_finished(run, what: str) -> None:
    state = run.status.state if run.status else "unknown"
    if state != "finished":
        failure = run.status.failure if run.status else None
        raise Failed(
            f"{what}: run {run.id} is {state}" + (f" ({failure.signature} at log.txt line {failure.line}: {failure.text})" if failure else "")
        )


def _rollouts_logged(run) -> int:
    return len({n for n, _ in run.series(ABS_DIFF)})
