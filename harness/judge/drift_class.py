"""Steps 1, 3 and 4 of a rung's judgement: its drift class, decided from typed evidence in the seed's
order (framework, then no effect, then semantics, then numerics; harness.judge.ladder's docstring
gives the procedure). `classify` takes a measured judgement (harness.judge.ladder.measure), the
runs and the evidence (harness.judge.evidence) and returns a new judgement. A step whose evidence
depends on the delta's direction (the drifting run's probe 6 or boundary table, the drifting rung's
replay run or drift budget) lists what it needs (`RungJudgement.needs`) when it is not in hand; the gatherer
(harness.experiment.evidence) supplies it and classifies again. No probe runs here.
"""

from __future__ import annotations

import copy
import fnmatch

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge.budget import LOCALISED, NOT_LOCALISED, RungBudget
from harness.judge.completeness import series_problems
from harness.judge.evidence import BoundaryResult, BudgetNotMeasured, Need, RungEvidence
from harness.judge.ladder import RungJudgement, abs_diff_after_warmup, holm_level_or_alone
from harness.records.metric_names import ABS_DIFF
from harness.records.runload import Run
from harness.spec import Knobs, backends
from harness.spec.flag_read import is_on, number_flag
from harness.spec.schema import Rung


def replay_is_identity(flags: dict) -> bool:
    """The declared sampling leaves one candidate contract (T=1, top_p=1, top-k off): a replay run
    would replay nothing, so probe 6's measured temperature fit decides semantics there, never the flags."""
    return (
        number_flag(flags, "rollout-temperature", 1.0) == 1.0
        and number_flag(flags, "rollout-top-p", 1.0) >= 1.0
        and number_flag(flags, "rollout-top-k", -1) <= 0
    )


def _explained_flags(knobs: Knobs) -> set[str]:
    return set(knobs.classification.precision_flags.flags) | set(knobs.classification.workload_flags.flags)


def changed_flags(child: Run, parent: Run) -> set[str]:
    a, b = child.spec.flags, parent.spec.flags
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def classify(
    rung: Rung,
    knobs: Knobs,
    measured: RungJudgement,
    children: list[Run],
    parents: list[Run],
    evidence: RungEvidence,
    holm: outcomes.HolmLevel | None = None,
) -> RungJudgement:
    """Steps 1, 3 and 4 on a measured rung: the drift class from the evidence, in the seed's order
    (framework, then no effect, then semantics, then numerics). Returns a new judgement; one that
    stopped for evidence it lacks lists it in `needs`."""
    judgement = copy.deepcopy(measured)
    if judgement.problems:
        return judgement
    if rung.parent is None:
        _root_framework(judgement, children[0], evidence)
        return judgement
    if evidence.paired is not None:  # evidence beside the trajectory delta; the decision stays the trajectory's
        measured_pair = evidence.paired
        paired = measured_pair.as_dict() if hasattr(measured_pair, "as_dict") else {"not_checked": measured_pair.reason}
        judgement.evidence = _insert_before(judgement.evidence, "decision", "paired_delta", paired)
        judgement.paired_summary = measured_pair.summary()
    if _framework_step(judgement, children + parents, evidence):
        return judgement
    if _no_effect_step(judgement, rung, knobs, holm_level_or_alone(holm, rung, knobs), children, evidence):
        return judgement
    drifting, drifting_rung = (children[0], rung.id) if judgement.diff.diff > 0 else (parents[0], rung.parent)
    own_contract = None
    if drifting is not children[0]:
        # The rung lowers the drift: the drift it removes is the parent's, so the class below is decided
        # on the parent's evidence and is the parent's answer (recorded as such). Whether the rung itself
        # keeps the sampling contract is its own runs' question: probe 6 on each of them.
        judgement.evidence["class_from"] = {"rung": rung.parent, "run": parents[0].id, "why": "the delta is down: the drift removed is the parent's"}
        own_contract = _own_contract(judgement, children, evidence)
        if own_contract is _DECIDED:
            return judgement
    removed = _semantic_step(judgement, rung, knobs, drifting, drifting_rung, children[0], parents[0], evidence)
    if own_contract is not None:
        judgement.ruled_out.pop("semantic", None)
        if own_contract:
            judgement.ruled_out["semantic"] = own_contract
    if removed is _DECIDED:
        return judgement
    if removed is not None and removed >= knobs.threshold("semantic_replay_min_removed_fraction"):
        judgement.drift_class = "semantic"
        return judgement
    if removed is not None:
        judgement.ruled_out["semantic"] = (
            f"replaying the processed contract removes {removed:.0%} of the delta "
            f"(< thresholds.semantic_replay_min_removed_fraction {knobs.threshold('semantic_replay_min_removed_fraction'):g})"
        )
    _numerical_step(judgement, knobs, drifting, drifting_rung, children[0], parents[0], evidence)
    if drifting is not children[0]:
        # The class is the parent's; whether the rung's own run breaks an operator boundary is its own
        # question, as its contract is (probe 6 above): its boundary table, as on an undetermined delta.
        # The parent's budget speaks for the parent's drift, not for this rung's runs.
        judgement.ruled_out.pop("candidate-operator", None)
        _own_boundary_table(judgement, children[0], evidence)
    return judgement


_DECIDED = object()  # _semantic_step's answer when it decided the class (or stopped) itself


def _insert_before(mapping: dict, before: str, key: str, value) -> dict:
    """`mapping` with `key` placed just before `before` (the evidence reads in the order it was found)."""
    items = [(k, v) for k, v in mapping.items() if k != key]
    index = next((i for i, (k, _) in enumerate(items) if k == before), len(items))
    return dict([*items[:index], (key, value), *items[index:]])


def _root_framework(judgement: RungJudgement, child: Run, evidence: RungEvidence) -> None:
    """A root is still a run of the pipeline: a sample or weight mismatch there would make every rung
    above it meaningless, so it gets the framework probes like any other rung."""
    if evidence.framework is None:
        return
    failed = list(evidence.framework[child.id].failed)
    judgement.evidence["framework_checks"] = {child.id: failed or "pass"}
    if failed:
        judgement.drift_class = "framework"
        judgement.reasons.append(f"framework probe failed on {child.id}: {failed[0]}")


def _framework_step(judgement: RungJudgement, sides: list[Run], evidence: RungEvidence) -> bool:
    """Step 1: a failed framework probe on any run, the rung's or its parent's, is framework drift
    whatever the mean does. Framework drift is ruled out only when none failed and none went unchecked."""
    if evidence.framework is None:
        return False
    for side in sides:
        failed = list(evidence.framework[side.id].failed)
        judgement.evidence.setdefault("framework_checks", {})[side.id] = failed or "pass"
        if failed:
            judgement.drift_class = "framework"
            judgement.reasons.append(f"framework probe failed on {side.id}: {failed[0]}")
            return True
    unchecked = [
        f"{side.id}: {what}"
        for side in sides
        for what in (evidence.framework[side.id].not_checked if evidence.framework[side.id].not_checked is not None else ["not asked"])
    ]
    if unchecked:
        judgement.evidence["framework_not_checked"] = unchecked
    else:
        judgement.ruled_out["framework"] = f"framework probes 1-2 (sample identity, weights) pass on all {len(sides)} runs"
    return False


def _family_text(holm: outcomes.HolmLevel) -> str:
    return f"Holm rank {holm.rank} of a family of {holm.family_size}, adjusted alpha {holm.alpha:.3g}"


def _no_effect_step(
    judgement: RungJudgement, rung: Rung, knobs: Knobs, holm: outcomes.HolmLevel, children: list[Run], evidence: RungEvidence
) -> bool:
    """Step 2's classes: flat -> none; inconclusive but not up -> none; otherwise inconclusive ->
    undetermined (probe 6 may still rule semantic drift out). True when the class is decided here."""
    diff, result, family = judgement.diff, judgement.outcome, _family_text(holm)
    if result.direction == "flat":
        judgement.reasons.append(f"delta {diff.diff:+.3g} is no effect: {result.describe()} ({family})")
        _rule_out_every_source(judgement, "the delta is no effect")
        return True
    if result.direction != "inconclusive":
        judgement.reasons.append(f"delta {diff.diff:+.3g} is an effect: {result.describe()} ({family})")
        return False
    # One side can still be decided: when the interval's upper end stays below +E the rung adds
    # no drift of interest, so no drift source needs explaining (class none), whether or not it
    # lowers the drift. Every drift class names a cause of *added* drift (a mishandled contract
    # or a broken sync only ever adds), so "not up" is enough to rule them out.
    one_sided = outcomes.not_up(diff, result.effect, 1.0 - knobs.threshold("bootstrap_confidence"), holm.family_size)
    judgement.evidence["decision"]["not_up"] = {
        "decided": one_sided.decided,
        "upper_bound": one_sided.upper,
        "confidence": one_sided.confidence,
        "rule": "one-sided, Bonferroni over the family",
    }
    if one_sided.decided:
        judgement.reasons.append(
            f"delta {diff.diff:+.3g}: {result.describe()} ({family}); not up: {one_sided.describe()}, so the rung adds "
            "no drift of interest (class none); whether it lowers the drift is undecided"
        )
        _rule_out_every_source(judgement, "not up: the rung adds no drift of interest")
        return True
    judgement.drift_class = "undetermined"
    judgement.reasons.append(f"delta {diff.diff:+.3g}: {result.describe()} ({family}); no drift class is decided on it")
    _contract_on_every_replicate(judgement, rung.id, children, evidence)
    _own_boundary_table(judgement, children[0], evidence)
    return True


def _semantic_step(judgement, rung: Rung, knobs: Knobs, drifting: Run, drifting_rung: str, child: Run, parent: Run, evidence: RungEvidence):
    """Step 3: the fraction of the delta that replaying the rollout's processed contract removes (None
    when not measured), or _DECIDED when this step decided the class (or stopped for evidence)."""
    replay_flag = knobs.classification.semantic_replay.flag
    steadier = parent if drifting is child else child
    if (
        getattr(backends.of_run(drifting.spec.backend), "trainer_in_repo", False)
        and is_on(steadier.spec.flags, replay_flag)
        and changed_flags(steadier, drifting) == {replay_flag}
    ):
        # The rung's own change is the replay: its run is the drifting side's replay run, so the replay's
        # share of the delta would compare a run with itself (1.0 by construction). Probe 6 on the
        # drifting run decides the contract instead, as on a backend without a replay run.
        judgement.reasons.append(f"the rung's own change is the replay ({replay_flag}): its replay share would compare a run with itself")
        return _contract_probe_decides(judgement, knobs, drifting, child, parent, evidence)
    if is_on(drifting.spec.flags, replay_flag):
        judgement.reasons.append(f"the drifting side already replays the processed contract ({replay_flag})")
        judgement.ruled_out["semantic"] = f"the drifting side replays the rollout's processed contract ({replay_flag})"
        return None
    if replay_is_identity(drifting.spec.flags):
        # No replay can remove anything here; whether each side applied the declared temperature is
        # measured by probe 6 (each side's fitted T_hat against the declared T), or semantics stays open.
        return _DECIDED if _contract_probe_rules(judgement, drifting, evidence) else None
    if getattr(backends.of_run(drifting.spec.backend), "trainer_in_repo", False):  # a replay run can be made here
        if drifting_rung not in evidence.replay:
            judgement.needs.append(Need("replay", drifting_rung))
            return _DECIDED
        return _replay_removes(judgement, knobs, evidence.replay[drifting_rung], drifting, drifting_rung, child, parent)
    return _contract_probe_decides(judgement, knobs, drifting, child, parent, evidence)


def _replay_removes(judgement, knobs: Knobs, replayed: Run, drifting: Run, drifting_rung: str, child: Run, parent: Run):
    """The replay run's share of the delta removed; a missing or non-finite step makes the rung not judged."""
    warmup = int(knobs.threshold("warmup_steps"))
    incomplete = series_problems(replayed, ABS_DIFF, knobs, f"{drifting_rung} replaying the processed contract")
    if incomplete:
        judgement.problems = ["not judged: " + "; ".join(incomplete)]
        return _DECIDED
    steadier = parent if drifting is child else child
    replayed_values = abs_diff_after_warmup(replayed, warmup)
    # The replay run has the first seed only: it is compared seed for seed with the first seeds'
    # delta (the replicates' delta when the first seeds alone do not show the drift).
    steadier_mean = float(np.mean(abs_diff_after_warmup(steadier, warmup)))
    first_seed_delta = float(np.mean(abs_diff_after_warmup(drifting, warmup))) - steadier_mean
    remaining = float(np.mean(replayed_values)) - steadier_mean
    removed = 1.0 - remaining / (first_seed_delta if first_seed_delta > 0 else abs(judgement.diff.diff))
    judgement.evidence.update({"replay_run": replayed.id, "replay_mean": float(np.mean(replayed_values)), "removed_fraction": removed})
    judgement.reasons.append(f"replaying the processed contract on {drifting_rung} removes {removed:.0%} of the delta")
    return removed


def _contract_probe_rules(judgement, drifting: Run, evidence: RungEvidence) -> bool:
    """Probe 6 on the drifting run: a fail is semantic, anything but a pass leaves the class undecided
    (needs probe 6), a pass rules semantics out with the probe's measured figures. True when it decided
    the class or stopped for the probe (a Need); False when it passed."""
    if not evidence.contract_probe:
        status, verdict = "not checked", "no contract probe was given"
    elif drifting.id not in evidence.contract:
        judgement.needs.append(Need("contract", drifting.id))
        return True
    else:
        status, verdict = evidence.contract[drifting.id].status, evidence.contract[drifting.id].verdict
    judgement.evidence["contract_probe"] = {"run": drifting.id, "status": status, "verdict": verdict}
    if status == "fail":
        judgement.drift_class = "semantic"
        judgement.reasons.append(f"probe 6 on {drifting.id}'s dumps: {verdict}")
        return True
    if status != "pass":
        judgement.drift_class = "undecided"
        judgement.reasons.append(f"undecided: needs probe 6 (sampling contract) on {drifting.id}: {verdict}")
        return True
    judgement.reasons.append(f"probe 6 passes on {drifting.id}'s dumps: {verdict}")
    judgement.ruled_out["semantic"] = f"probe 6 passes on {drifting.id}: {verdict}"
    return False


def _contract_probe_decides(judgement, knobs: Knobs, drifting: Run, child: Run, parent: Run, evidence: RungEvidence):
    """No replay run on this backend: probe 6 on the drifting run's dumps decides the contract or
    nothing does; a sampling rung is never candidate-operator by elimination of flag names."""
    if _contract_probe_rules(judgement, drifting, evidence):
        return _DECIDED
    unexplained = changed_flags(child, parent) - _explained_flags(knobs)
    if unexplained:
        judgement.drift_class = "undecided"
        judgement.reasons.append(
            f"undecided: not semantic, and the changed flags {sorted(unexplained)} are neither precision nor workload knobs; "
            "what survives needs the numerical probes 3-7, which need probe bundles this backend does not record"
        )
        return _DECIDED
    return None


def _numerical_step(
    judgement: RungJudgement, knobs: Knobs, drifting: Run, drifting_rung: str, child: Run, parent: Run, evidence: RungEvidence
) -> None:
    """Step 4. What survives aligned semantics and the framework checks is numerical, and the drifting
    rung's drift budget decides it by intervention (harness.judge.budget): candidate-operator at the
    boundary whose lever alone removes the pre-registered share of the drift, expected-numerical when
    no boundary alone does, undecided when the budget is inconclusive or could not be measured. The
    drifting run's boundary table (harness.attribution.boundaries) is the second witness: recorded
    beside the budget, with the disagreement stated where the two differ. Never the flags' names."""
    judgement.evidence["changed_flags"] = sorted(changed_flags(child, parent))
    if evidence.boundary_table and drifting.id not in evidence.boundary:
        judgement.needs.append(Need("boundary", drifting.id))
    if evidence.drift_budget and drifting_rung not in evidence.budget:
        judgement.needs.append(Need("budget", drifting_rung))
    if judgement.needs:
        return
    table = evidence.boundary[drifting.id] if evidence.boundary_table else BoundaryResult("not checked", "no boundary check was given")
    judgement.evidence["boundary_table"] = {"run": drifting.id, "status": table.status, "verdict": table.verdict, "boundary": table.boundary}
    budget = evidence.budget.get(drifting_rung) if evidence.drift_budget else BudgetNotMeasured("no drift budget was given")
    if not isinstance(budget, RungBudget):
        why = budget.reason if isinstance(budget, BudgetNotMeasured) else "no drift budget was given"
        judgement.drift_class = "undecided"
        judgement.evidence["drift_budget"] = {"rung": drifting_rung, "verdict": "not measured", "reason": why}
        judgement.reasons.append(
            f"undecided: needs the drift budget of {drifting_rung} (the intervention that decides it): {why}; {_witness_text(table)}"
        )
        return
    judgement.evidence["drift_budget"] = {"rung": drifting_rung, "verdict": budget.verdict, "boundary": budget.boundary, "reason": budget.reason}
    witnesses = judgement.evidence["witnesses"] = _witnesses(budget, table, knobs)
    if witnesses["agree"] is not None:  # the second witness, in the record beside the decision
        said = "agrees" if witnesses["agree"] else f"disagrees: {witnesses['disagreement']}"
        judgement.reasons.append(
            f"second witness, {drifting.id}'s boundary table: {table.status}{f' at {table.boundary}' if table.boundary else ''}; it {said}"
        )
    if budget.verdict == LOCALISED:
        judgement.drift_class = "candidate-operator"
        judgement.reasons.append(f"the delta survives aligned semantics and framework checks; {drifting_rung}'s drift budget: {budget.reason}")
    elif budget.verdict == NOT_LOCALISED:
        judgement.drift_class = "expected-numerical"
        judgement.ruled_out.setdefault("candidate-operator", f"{drifting_rung}'s drift budget: no boundary's lever alone removes its share")
        judgement.reasons.append(f"the delta survives aligned semantics; {drifting_rung}'s drift budget: {budget.reason}")
    else:
        judgement.drift_class = "undecided"
        judgement.reasons.append(f"undecided: {drifting_rung}'s drift budget is {budget.reason}")


def _witness_text(table: BoundaryResult) -> str:
    return f"the boundary table (second witness) says {table.status}: {table.verdict}"


def _witnesses(budget: RungBudget, table: BoundaryResult, knobs: Knobs) -> dict:
    """The budget beside the envelope table: whether they agree, and how they differ where not."""
    rows = knobs.levers.levers[budget.boundary].envelope_rows if budget.boundary and knobs.levers else []
    if table.status not in ("within", "breaks"):
        agree, disagreement = None, None
    elif budget.verdict == LOCALISED and table.status == "breaks":
        agree = any(fnmatch.fnmatch(table.boundary or "", pattern) for pattern in rows)
        disagreement = None if agree else f"the budget localises the drift to {budget.boundary}, the envelope table breaks at {table.boundary}"
    elif budget.verdict == LOCALISED:
        agree, disagreement = (
            False,
            f"the budget localises the drift to {budget.boundary}, the envelope table finds every boundary within its envelope",
        )
    elif table.status == "breaks":
        agree, disagreement = (
            False,
            f"the envelope table breaks at {table.boundary}, the budget localises the drift to no boundary ({budget.verdict})",
        )
    else:
        agree, disagreement = True, None
    return {
        "budget": budget.verdict,
        "budget_boundary": budget.boundary,
        "boundary_table": table.status,
        "table_boundary": table.boundary,
        "agree": agree,
        "disagreement": disagreement,
    }


def _own_boundary_table(judgement: RungJudgement, child: Run, evidence: RungEvidence) -> None:
    """An undetermined delta decides no class (and a delta that is down takes its parent's), but whether
    an operator boundary of the rung's own run breaks its envelope can still be measured: every boundary
    within rules candidate-operator drift out for the rung."""
    if not evidence.boundary_table:
        return
    if child.id not in evidence.boundary:
        judgement.needs.append(Need("boundary", child.id))
        return
    table = evidence.boundary[child.id]
    judgement.evidence["own_boundary_table"] = {"run": child.id, "status": table.status, "verdict": table.verdict, "boundary": table.boundary}
    if table.status == "within":
        judgement.ruled_out["candidate-operator"] = f"{child.id}'s boundary table: every boundary within its envelope"


def _own_contract(judgement: RungJudgement, children: list[Run], evidence: RungEvidence):
    """Probe 6 on each of the rung's own runs: the evidence that rules semantic drift out (its verdict),
    "" when it does not (a fail or a run not checked, recorded), or _DECIDED while a result is needed."""
    if not evidence.contract_probe:
        judgement.evidence["own_contract_probe"] = {"status": "not checked", "verdict": "no contract probe was given"}
        return ""
    missing = [run.id for run in children if run.id not in evidence.contract]
    if missing:
        judgement.needs += [Need("contract", run_id) for run_id in missing]
        return _DECIDED
    results = {run.id: evidence.contract[run.id] for run in children}
    judgement.evidence["own_contract_probe"] = {run_id: {"status": r.status, "verdict": r.verdict} for run_id, r in results.items()}
    if all(r.status == "pass" for r in results.values()):
        return f"probe 6 (sampling contract) passes on each of the rung's {len(results)} runs"
    return ""


def _rule_out_every_source(judgement: RungJudgement, why: str) -> None:
    """Class none: the rung adds no drift of interest, so no numerical or contract cause of added drift
    needs explaining. Framework drift is not among them: only probes 1-2 rule that out (a sync fault
    confined to a few rollouts can leave the mean where it was)."""
    for drift_class in ("semantic", "candidate-operator", "expected-numerical"):
        judgement.ruled_out.setdefault(drift_class, why)


def _contract_on_every_replicate(judgement: RungJudgement, rung_id: str, children: list[Run], evidence: RungEvidence) -> None:
    """An undetermined delta decides no class, but the sampling contract can still be checked directly:
    probe 6 on each of the rung's own runs (its dumps and probe bundles). Passing on every replicate
    rules semantic drift out; failing on any is semantic drift (probe 6 fails only when replaying the
    rollout's contract removes the drift it measures); a run it could not check rules nothing out."""
    if not evidence.contract_probe:
        judgement.evidence["contract_probe"] = {"status": "not checked", "verdict": "no contract probe was given"}
        return
    missing = [run.id for run in children if run.id not in evidence.contract]
    if missing:
        judgement.needs += [Need("contract", run_id) for run_id in missing]
        return
    results = {run.id: (evidence.contract[run.id].status, evidence.contract[run.id].verdict) for run in children}
    judgement.evidence["contract_probe"] = {run_id: {"status": status, "verdict": verdict} for run_id, (status, verdict) in results.items()}
    failed = {run_id: verdict for run_id, (status, verdict) in results.items() if status == "fail"}
    if failed:
        run_id, verdict = next(iter(failed.items()))
        judgement.drift_class = "semantic"
        judgement.reasons.append(f"probe 6 on {run_id}'s dumps: {verdict}")
    elif all(status == "pass" for status, _ in results.values()):
        judgement.ruled_out["semantic"] = f"probe 6 (sampling contract) passes on each of {rung_id}'s {len(results)} runs"
        judgement.reasons.append(
            f"not semantic: probe 6 passes on each of {rung_id}'s {len(results)} runs"
            + ("; not framework: probes 1-2 pass on every run" if "framework" in judgement.ruled_out else "")
        )
    else:
        unchecked = next(f"{run_id}: {verdict}" for run_id, (status, verdict) in results.items() if status != "pass")
        judgement.reasons.append(f"semantic drift not ruled out: probe 6 not checked on {unchecked}")
