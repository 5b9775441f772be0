"""The evidence, gathered from runs and their files for the judge, which opens none itself
(harness.judge.ladder, acceptance and ab decide).

The judge takes numbers and evidence; this module is where the evidence comes from: the rung's
and its parent's runs at every replicate seed, the framework probes (1-2) and the sampling-contract
probe (6) on their dumps and the boundary table (harness.attribution), the paired per-token delta
(harness.judge.paired's numbers on scores from the scorer process), and the replay run. Each probe
runs once per run per process: a parent rung is judged by several children. The acceptance
criteria get the run's log failures (acceptance_context); the A/B contract the pair's prompt
hashes, operator counts and execution decisions (pair_files).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.judge import drift_class, ladder
from harness.judge.evidence import BoundaryResult, ContractResult, FrameworkResult, RungEvidence
from harness.recipes import DATA_RECIPES, URI_PREFIX, recipe_hash
from harness.records.runload import Run
from harness.spec import Knobs, backends


@dataclass
class Probes:
    """The attribution probes the ladder's evidence comes from, each run once per run id."""

    knobs: Knobs
    _framework: Callable | None = None
    _contract: dict = field(default_factory=dict)
    _boundary: dict = field(default_factory=dict)
    _budget: dict = field(default_factory=dict)

    def framework_messages(self, run: Run) -> tuple[list[str], list[str]]:
        """(failed, not checked) messages of probes 1 (sample/token identity) and 2 (model state)."""
        if self._framework is None:
            from harness.attribution.probes import cached_framework_messages

            self._framework = cached_framework_messages()
        return self._framework(run)

    def framework_checks(self, run: Run) -> list[str]:
        return self.framework_messages(run)[0]

    def framework_not_checked(self, run: Run) -> list[str]:
        return self.framework_messages(run)[1]

    def contract_check(self, run: Run) -> tuple[str, str]:
        """Probe 6 (sampling contract) on the run's dumps: (status, verdict)."""
        if run.id not in self._contract:
            from harness.attribution.probes import contract_check

            verdict = contract_check(run, self.knobs)
            self._contract[run.id] = (verdict.status, verdict.verdict)
        return self._contract[run.id]

    def boundary_check(self, run: Run) -> tuple[str, str, str | None]:
        """The run's boundary table: (status within | breaks | not checked, reason, boundary)."""
        if run.id not in self._boundary:
            from harness.attribution.boundaries import boundary_status

            self._boundary[run.id] = boundary_status(run, self.knobs)
        return self._boundary[run.id]

    def drift_budget(self, rung_id: str, runs: list[Run]):
        """The rung's drift budget over these runs (budget_runs): RungBudget or BudgetNotMeasured."""
        return self.drift_budgets([(rung_id, runs)])[0]

    def drift_budgets(self, requests: list[tuple[str, list[Run]]]) -> list:
        """Several rungs' drift budgets; those not in hand re-scored side by side, one scorer process a
        usable core (each scorer runs one thread: harness.embedded.threads), as runs are launched."""
        from concurrent.futures import ThreadPoolExecutor

        from harness.experiment.budget_scores import rung_budget
        from harness.launch.parallel import usable_cores

        keys = [(rung_id, tuple(run.id for run in runs)) for rung_id, runs in requests]
        missing = {key: (rung_id, runs) for key, (rung_id, runs) in zip(keys, requests) if key not in self._budget}
        if missing:
            # Later rungs first: a rung carries its parents' knobs and one more (fp8, then filters), so it
            # scores more settings; the longest scorers started first finish the set soonest.
            order = {rung_id: i for i, rung_id in enumerate(self.knobs.levers.budget.rungs)} if self.knobs.levers else {}
            ordered = sorted(missing.items(), key=lambda item: -order.get(item[1][0], -1))
            with ThreadPoolExecutor(max_workers=max(1, min(len(missing), usable_cores()))) as pool:
                done = {key: pool.submit(rung_budget, rung_id, runs, self.knobs) for key, (rung_id, runs) in ordered}
                for key, future in done.items():
                    try:
                        self._budget[key] = future.result()
                    except ValueError as err:  # a budget the judge cannot compute is not measured, and says why
                        from harness.judge.evidence import BudgetNotMeasured

                        self._budget[key] = BudgetNotMeasured(f"{type(err).__name__}: {str(err).splitlines()[0]}")
        return [self._budget[key] for key in keys]


def paired_for(backend: str, knobs: Knobs) -> Callable | None:
    """The paired per-token delta (child, parent) -> PairedDelta | NotChecked, on the embedded backend only."""
    if not backends.backend(backend).trainer_in_repo:  # the scorer rebuilds this repository's trainer
        return None
    from harness.experiment.paired_scores import paired_delta

    return lambda child, parent: paired_delta(child, parent, knobs)


def fetch_many(fetch: Callable[..., Run], requests: list[tuple[str, dict]]) -> list[Run]:
    """The run of each (rung_id, overrides): launched side by side where `fetch` can
    (harness.experiment.runs.Fetch.many), else one after another."""
    many = getattr(fetch, "many", None)
    return many(requests) if many is not None else [fetch(rung_id, **overrides) for rung_id, overrides in requests]


def replicate_sets(sides: list, fetch: Callable[..., Run], count: int) -> list[list[Run]]:
    """Each side's run and its replicates (a side is a rung id, or (rung id, overrides) for a rung run
    with flags set): the same spec at seeds seed+1 .. seed+count-1 (the stage's `replicates` knob).
    Replicate 0 is the run itself, so one seed reuses the runs it always had. The sides' runs are
    launched together: the first seeds, then, once those say which seed each side starts from,
    every replicate."""
    sides = [(side, {}) if isinstance(side, str) else (side[0], dict(side[1])) for side in sides]
    firsts = fetch_many(fetch, sides)
    if count <= 1:
        return [[first] for first in firsts]
    seeds = [int(first.spec.flag("seed") if first.spec.flag("seed") is not None else 1234) for first in firsts]  # VIME's default seed
    rest = fetch_many(fetch, [(rung_id, {**flags, "seed": seed + i}) for (rung_id, flags), seed in zip(sides, seeds) for i in range(1, count)])
    return [[first, *rest[k * (count - 1) : (k + 1) * (count - 1)]] for k, first in enumerate(firsts)]


def rung_difference(rung, knobs: Knobs, fetch: Callable[..., Run], replicates: int = 1):
    """harness.judge.ladder.rung_difference on the rung's and its parent's runs at every replicate seed."""
    children, parents = replicate_sets([rung.id, rung.parent], fetch, replicates)
    return ladder.rung_difference(rung, knobs, children, parents)


def family_levels(knobs: Knobs, stage: str, backend: str, fetch: Callable[..., Run]):
    """Holm levels of the stage's family (harness.judge.ladder.family_levels) from its members' runs,
    every member's and parent's runs launched together first."""
    replicates = knobs.stages[stage].replicate_count(backend)
    members = ladder.family_members(knobs, stage, backend)
    involved = list(dict.fromkeys(rung_id for member in members for rung_id in (member, knobs.rungs[member].parent) if rung_id))
    replicate_sets(involved, fetch, replicates)
    return ladder.family_levels(knobs, {rung_id: rung_difference(knobs.rungs[rung_id], knobs, fetch, replicates) for rung_id in members})


def judge_rung(
    rung,
    knobs: Knobs,
    fetch: Callable[..., Run],
    framework_checks: Callable[[Run], list[str]] | None = None,
    holm=None,
    contract_check: Callable[[Run], tuple[str, str]] | None = None,
    replicates: int = 1,
    paired: Callable[[Run, Run], object] | None = None,
    boundary_check: Callable[[Run], tuple[str, str, str | None]] | None = None,
    framework_not_checked: Callable[[Run], list[str]] | None = None,
    drift_budget: Callable[[str, list[Run]], object] | None = None,
):
    """Gather a rung's evidence, then judge it (harness.judge.ladder.measure, then harness.judge.drift_class.classify). `fetch(rung_id, **overrides)`
    returns a run at the same stage and mode; `replicates` is how many seeds a side is judged on;
    `framework_checks(run)` returns the failed framework probes' messages and `framework_not_checked(run)`
    those that could not run; `contract_check(run)` is probe 6, (status, verdict); `boundary_check(run)`
    the boundary table, (status, reason, boundary); `paired(child, parent)` the paired per-token delta;
    `drift_budget(rung_id, runs)` the rung's drift budget over its seeds' runs.
    Each is asked only for the runs the judgement reaches; a source not given is "not checked"."""
    children = [fetch(rung.id)]
    parents: list[Run] = []
    if rung.parent is not None and not ladder.first_seed_problems(rung, knobs, children[0]):
        children, parents = replicate_sets([rung.id, rung.parent], fetch, replicates)
    measured = ladder.measure(rung, knobs, children, parents, holm)
    if measured.problems:
        return measured
    evidence = RungEvidence(
        contract_probe=contract_check is not None, boundary_table=boundary_check is not None, drift_budget=drift_budget is not None
    )
    if framework_checks is not None:
        evidence.framework = {
            run.id: FrameworkResult(tuple(framework_checks(run)), tuple(framework_not_checked(run)) if framework_not_checked else None)
            for run in children + parents
        }
    if paired is not None and parents:
        evidence.paired = paired(children[0], parents[0])
    runs = {run.id: run for run in children + parents}
    for _ in range(4):  # each round gives a step what it asked for; three steps can ask
        judgement = drift_class.classify(rung, knobs, measured, children, parents, evidence, holm)
        if not judgement.needs:
            return judgement
        for need in judgement.needs:
            if need.kind == "contract":
                evidence.contract[need.key] = ContractResult(*contract_check(runs[need.key]))
            elif need.kind == "boundary":
                evidence.boundary[need.key] = BoundaryResult(*boundary_check(runs[need.key]))
            elif need.kind == "replay":
                evidence.replay[need.key] = fetch(need.key, **{knobs.classification.semantic_replay.flag: True})
            elif need.kind == "budget":
                evidence.budget[need.key] = drift_budget(need.key, children if need.key == rung.id else parents)
    raise AssertionError(f"{rung.id}: the judgement still needs {judgement.needs} after every round of evidence")


def judge_ladder_rung(
    rung,
    knobs: Knobs,
    fetch: Callable[..., Run],
    probes: Probes,
    *,
    holm,
    replicates: int,
    backend: str,
    budget_fetch: Callable[..., Run] | None = None,
):
    """One rung judged against its parent with every piece of evidence the judge can use. A rung's drift
    budget is its budget runs' (`budget_fetch`: the budget stage's fetcher), whatever seeds it is judged on."""
    return judge_rung(
        rung,
        knobs,
        fetch,
        probes.framework_checks,
        holm,
        probes.contract_check,
        replicates=replicates,
        paired=paired_for(backend, knobs),
        boundary_check=probes.boundary_check,
        framework_not_checked=probes.framework_not_checked,
        drift_budget=None
        if budget_fetch is None
        else (lambda rung_id, _runs: probes.drift_budget(rung_id, budget_runs(rung_id, knobs, budget_fetch))),
    )


def prompts_fingerprint(prompt_data: str | None) -> str | None:
    """sha256 of the prompt file (or folder) the flag points at. An embedded data set
    (embedded://data/NAME) is generated from its recipe (harness.recipes: same recipe, same prompts,
    byte for byte), so the recipe's hash stands for its content; an unknown name is None (unreadable)."""
    if not prompt_data:
        return None
    if prompt_data.startswith(URI_PREFIX + "data/"):
        recipe = DATA_RECIPES.get(prompt_data.removeprefix(URI_PREFIX + "data/"))
        return None if recipe is None else hashlib.sha256(f"recipe {recipe_hash(recipe)}".encode()).hexdigest()
    path = Path(prompt_data)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    elif path.is_file():
        files = [path]
    else:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()


def pair_files(baseline: Run, candidate: Run, knobs: Knobs):
    """What the A/B contract reads from the pair's files (harness.judge.ab.PairFiles): each side's
    prompt data hashed, the embedded candidate's operator counts judged against the baseline's, and
    the candidate's execution decision records."""
    from harness.judge.ab import PairFiles
    from harness.judge.candidate_execution import judge_execution
    from harness.records.execution_decisions import read_decisions
    from harness.records.metric_names import ABS_DIFF
    from harness.records.operator_calls import read_operator_calls

    prompts = tuple(prompts_fingerprint(run.spec.flag("prompt-data")) for run in (baseline, candidate))
    execution = None
    if getattr(backends.of_run(candidate.spec.backend), "trainer_in_repo", False):  # it counts its operator calls
        calls, problem = read_operator_calls(candidate.path)
        base, _ = read_operator_calls(baseline.path)
        logged = len({n for n, _ in candidate.series(ABS_DIFF)})
        execution = judge_execution(calls, problem, baseline=base, rollouts_logged=logged)
    else:
        execution = vime_execution(baseline, candidate)
    decisions, warnings = read_decisions(candidate.path)
    return PairFiles(prompts=prompts, execution=execution, decisions=decisions, decision_warnings=warnings)


def vime_execution(baseline: Run, candidate: Run):
    """A VIME candidate's execution judged on its own log (harness.judge.vime_execution): the two
    runs' evidence lines and the candidate's train/rl_kernel_* series."""
    from harness.judge.vime_execution import judge_vime_execution
    from harness.records.log_evidence import read_log_evidence

    series = {name: candidate.series(name) for name in candidate.metric_names() if name.startswith("train/rl_kernel_")}
    return judge_vime_execution(
        dict(candidate.spec.flags),
        dict(baseline.spec.flags),
        read_log_evidence(candidate.path),
        read_log_evidence(baseline.path),
        series,
        candidate.steps(),
    )


def contract_problems(baseline: Run, candidate: Run, knobs: Knobs) -> list[str]:
    """Why the pair is not a same-workload A/B (harness.judge.ab.contract_problems on its gathered files)."""
    from harness.judge import ab

    return ab.contract_problems(baseline, candidate, knobs, pair_files(baseline, candidate, knobs))


def acceptance_context(run: Run, knobs: Knobs, fetch: Callable[..., Run], check: str | None = None):
    """The judged run and the runs `check` compares it with (harness.judge.acceptance.NEEDS; every
    check's when None), fetched at the judged run's stage and mode: the judged spec at every seed the
    stage judges (its replicates), the near-aligned rung at the same seeds. A run the fetcher does not
    know (LookupError) is left out: the check then judges the seeds it has, or says what it lacked; a
    run it fails to find or launch fails the caller as it would have."""
    from harness.judge.acceptance import NEEDS, JudgeContext

    needs = NEEDS.get(check, ()) if check is not None else {need for wanted in NEEDS.values() for need in wanted}
    context = JudgeContext(run=run, knobs=knobs)
    context.log, context.log_failures = _log(run)
    seed, rung = run.spec.seed, run.spec.rung
    stage = knobs.stages.get(knobs.acceptance.judges["stage"])
    count = stage.replicate_count(run.spec.backend) if stage is not None and seed is not None else 1
    context.replicates = [run, *_seeds(fetch, rung, seed, range(1, count))] if count > 1 else []
    context.replicate_logs = {replicate.id: _log(replicate) for replicate in context.replicates[1:]}
    try:
        if "near_aligned" in needs:
            context.near_aligned = fetch("near-aligned")
            if count > 1:
                context.near_aligned_replicates = [context.near_aligned, *_seeds(fetch, "near-aligned", seed, range(1, count))]
    except LookupError:
        pass
    try:
        if "second_seed" in needs and seed is not None and rung and len(context.replicates) < 2:
            context.second_seed = fetch(rung, seed=seed + 1)
    except LookupError:
        pass
    return context


def _log(run: Run) -> tuple[str | None, list]:
    """The run's log file and its failure lines (harness.records.failures); (None, []) without a log."""
    log = run.path / "log.txt"
    if not log.is_file():
        return None, []
    from harness.records.logparse import parse_log_file

    return str(log), parse_log_file(log).failures


def _seeds(fetch: Callable[..., Run], rung: str, seed: int, offsets) -> list[Run]:
    """The rung at seed + each offset, as far as the fetcher knows them (it stops at the first it does not)."""
    runs = []
    for offset in offsets:
        try:
            runs.append(fetch(rung, seed=seed + offset))
        except LookupError:
            break
    return runs


def budget_runs(rung_id: str, knobs: Knobs, fetch: Callable[..., Run]) -> list[Run]:
    """The budget's sample of a rung (knobs/levers.yaml budget): its runs at the budget's own seeds,
    judging_seed onwards (plus a confirmatory sweep's offset, as every stage seed), launched together;
    `fetch` is the budget stage's."""
    policy = knobs.levers.budget
    first = policy.judging_seed + getattr(fetch, "seed_offset", 0)
    (runs,) = replicate_sets([(rung_id, {"seed": first})], fetch, policy.seeds)
    return runs


def drift_budget_answer(rung_id: str, knobs: Knobs, fetch: Callable[..., Run], probes: Probes):
    """A budget rung's drift budget over its budget runs, and what differs from its pre-registered
    answer: (RungBudget or BudgetNotMeasured, its expectation or None, findings; no findings: as
    expected). The main job's budget check, pytest's and the Session's alike."""
    from harness.judge.budget import expectation_findings

    budget = probes.drift_budget(rung_id, budget_runs(rung_id, knobs, fetch))
    expected = knobs.levers.budget.expect.get(rung_id) if knobs.levers else None
    return budget, expected, expectation_findings(budget, expected)
