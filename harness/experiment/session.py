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
from harness.experiment.plan import ab_replicates, mode_pairs
from harness.experiment.recorder import Recorder
from harness.judge import ab
from harness.judge.acceptance import CHECKS, JudgeContext, abs_diff_present_every_step
from harness.judge.candidate_execution import judge_pair_execution
from harness.judge.expectations import bound_findings
from harness.judge.held import Held, hold_ab, hold_criterion, hold_rung
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
        from harness.judge.preregistration import preregistration
        from harness.spec.design_file import load_design

        # Before any check is decided: what every answer is held to (harness.judge.preregistration).
        self.preregistration = preregistration(self.knobs, load_design(self.knobs.root))
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
        side_runs = replicate_sets(sides, fetch, replicates)
        for rung_id, runs in zip(sides, side_runs):
            for run in runs:
                _require_finished(run, f"{rung_id} at {stage} (seed {run.spec.flag('seed')})")
        holm = None
        if rung.parent is not None:
            if stage not in self._families:
                self._families[stage] = family_levels(self.knobs, stage, self.backend, fetch)
            holm = self._families[stage][rung.id]
        budget_fetch = self.fetch(self.knobs.levers.budget.stage) if self.knobs.levers is not None else None
        judgement = judge_ladder_rung(
            rung, self.knobs, fetch, self.probes, holm=holm, replicates=replicates, backend=self.backend, budget_fetch=budget_fetch
        )
        run = fetch(rung.id)
        parent = fetch(rung.parent) if rung.parent and stage in self.knobs.rungs[rung.parent].stages else None
        record.audit_delta(judgement, run, parent)
        record.rung(case, judgement, run, parent)
        _act_on(hold_rung(rung, judgement, run, self.knobs, parent, side_runs[0]))

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
        _act_on(hold_criterion(criterion, verdict, self.backend))

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
        """One of the gate's questions over every replicate pair, held to knobs/ab.yaml's expectation on
        this backend (harness.judge.held: a yes, a decided no, or the named report it leaves for)."""
        pair = self.ab_pair(name)
        contract = contract_problems(*pair, self.knobs)
        if contract:
            raise Failed(f"not judged: the A/B is rejected ({contract[0]})")
        answer = ab.QUESTIONS[question](*self.ab_sides(name), self.knobs)
        held = hold_ab(answer, self.knobs, self.backend, question, name)
        key = f"{name}:{question}" if name else question
        record.ab(answer.question, pair, passed=answer.passed, message=answer.message, evidence=answer.evidence, key=key, expected=held)
        _act_on(held)

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
        """The pair's answers in colocate and non-colocate over knobs/ab.yaml mode_pairs pairs a mode,
        compared (the seed's fifth question)."""
        chosen = self.knobs.ab.pair
        modes = ("colocate", "non-colocate")
        count = mode_pairs(self.knobs, self.backend)
        sides = {mode: tuple(replicate_sets([chosen.baseline, chosen.candidate], self.runs.fetcher(chosen.stage, mode), count)) for mode in modes}
        pairs = {mode: (baseline[0], candidate[0]) for mode, (baseline, candidate) in sides.items()}
        rejected = {mode: contract_problems(*p, self.knobs) for mode, p in pairs.items()}
        if any(rejected.values()):
            raise Failed(f"A/B rejected: {rejected}")
        answer = ab.mode_consistency(sides, self.knobs)
        held = hold_ab(answer, self.knobs, self.backend, "mode-consistency")
        record.ab(
            answer.question,
            pairs["colocate"],
            passed=answer.passed,
            message=answer.message,
            evidence=answer.evidence,
            key="mode-consistency",
            expected=held,
        )
        _act_on(held)

    # ------------------------------------------------------------------ the drift budget
    # Wiring of harness.judge.budget into the main job: one step, one call (drift_budget_answer).
    def budget(self, record: Recorder, rung_id: str) -> None:
        """Where a budget rung's drift lives, by intervention (knobs/levers.yaml): its runs re-scored
        under each lever, the drift shared out and localised, held to its pre-registered answer."""
        stage = self.knobs.levers.budget.stage
        if self.mode not in self.knobs.stages[stage].modes:
            raise Skipped(f"the budget's stage {stage} runs {', '.join(self.knobs.stages[stage].modes)} only, not --mode={self.mode}")
        budget, expected, findings = drift_budget_answer(rung_id, self.knobs, self.fetch(stage), self.probes)
        record.budget(rung_id, budget, expected)
        if findings:
            raise Failed(f"drift budget of {rung_id}: " + "; ".join(findings))
        if expected is None or (expected.verdict == "reported" and not expected.ruled_out):
            report, why = (expected.report, expected.reason) if expected else ("not-sized-on-embedded", "no expectation in knobs/levers.yaml")
            raise Skipped(f"drift budget of {rung_id} reported in {report!r} (knobs/reports.yaml): {why.strip()}")

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
        if criterion.expect == "reported":
            raise Skipped(f"{criterion.id} reported in {criterion.report!r} (knobs/reports.yaml): {criterion.reason.strip()}")
        if state != criterion.expect:
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
        from harness.experiment.candidate_ab import expectation

        expected = expectation(self.knobs, name, self.backend)
        if expected is None or expected.holds_nothing():
            report, why = (expected.report, expected.reason) if expected else ("not-sized-on-embedded", "no expectation in knobs/candidate.yaml")
            raise Skipped(f"{answer.label}: every answer reported in {report!r} (knobs/reports.yaml): {why.strip()}")

    def candidate_mixed_paths(self, record: Recorder) -> None:
        """The seed's A/B question 4 from the candidate's bf16 and fp8 pairs."""
        from harness.experiment.candidate_ab import judge_mixed_paths

        chosen = self.knobs.candidate.mixed_paths
        answers = {name: self._candidate_answer(name) for name in (chosen.bf16, chosen.fp8)}
        answer, findings = judge_mixed_paths(self.knobs, answers, self.backend)
        record.candidate_mixed_paths(answer, answers[chosen.bf16], answers[chosen.fp8])
        if findings:
            raise Failed("\n  ".join(findings))
        if chosen.expect.get(self.backend) in (None, "reported"):
            raise Skipped(
                f"BF16/FP8 mixed paths reported in {chosen.report or 'not-sized-on-embedded'!r} (knobs/reports.yaml): {chosen.reason.strip()}"
            )

    def _candidate_answer(self, name: str):
        """A candidate pair's runs gathered and judged once per session (the mixed-paths answer reuses them)."""
        from harness.experiment.candidate_ab import gather, judge_pair, replicates

        if name not in self._candidate_answers:
            baseline, candidate = gather(self.knobs, name, self.fetch, replicates(self.knobs, self.backend))
            self._candidate_answers[name] = judge_pair(name, self.knobs, baseline, candidate, self.backend)
        return self._candidate_answers[name]

    def _candidate_flags(self, name: str | None) -> dict | None:
        return None if name is None else dict(self.knobs.ab.candidates[name].set)


def _act_on(held: Held) -> None:
    """A held answer as its check reports it: a failure fails, an answer left for a named report is
    skipped naming it (never a pass)."""
    if held.status == "failed":
        raise Failed(held.message)
    if held.status == "reported":
        raise Skipped(held.skip_reason)


def _require_finished(run, what: str) -> None:
    state = run.status.state if run.status else "unknown"
    if state != "finished":
        failure = run.status.failure if run.status else None
        raise Failed(
            f"{what}: run {run.id} is {state}" + (f" ({failure.signature} at log.txt line {failure.line}: {failure.text})" if failure else "")
        )


def _rollouts_logged(run) -> int:
    return len({n for n, _ in run.series(ABS_DIFF)})
