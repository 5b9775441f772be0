"""One rung against its parent: the isolated delta with a confidence interval, and the drift class
decided from evidence (never from the rung's name).

Decision procedure, in the seed's order (rule out framework, then semantics, before numerics):
  1. The rung's run (or its parent's) fails a framework probe (sample/token identity, weight
     version) -> framework, whatever the mean does: a sync fault confined to a few rollouts makes
     a non-stationary series whose mean barely clears the noise, and it is still a framework fault.
  2. The delta's outcome against the minimum effect of interest E = max(rung_min_abs_delta,
     rung_flat_max_rel_delta x parent mean), at the Holm-adjusted level of the rung's family
     (harness.judge.outcome): flat -> none; inconclusive but "not up" (the one-sided upper bound
     below +E at the family's Bonferroni level: the rung adds no drift to explain) -> none;
     otherwise inconclusive -> undetermined (no class is decided on
     a delta the run cannot tell from no effect); up or down -> the steps below.
  3. Replaying the rollout's processed-logprob contract in the trainer removes at least
     semantic_replay_min_removed_fraction of the delta -> semantic. Where no replay run exists
     (VIME, records), probe 6 on the drifting run's dumps decides: fail -> semantic; not checked
     -> undecided (needs probe 6); pass on a rung whose flags are not precision/workload knobs ->
     undecided (never candidate-operator by elimination).
  4. What survives aligned semantics: the drifting run's boundary table (both engines' captured
     tensors, each boundary's divergence against its measured envelope) decides: every boundary
     within -> expected numerical; the first beyond k x its envelope -> candidate operator, named;
     no usable capture -> undecided (needs the boundary table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge import stats
from harness.judge.completeness import series_problems
from harness.judge.exact_zero import exactly_zero_findings
from harness.judge.margin import Margin, outcome_margin
from harness.judge.verdict import after_warmup
from harness.records.metric_names import ABS_DIFF
from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.schema import Rung


@dataclass
class RungJudgement:
    rung: str
    parent: str | None
    child_mean: float
    parent_mean: float | None = None
    diff: stats.DiffCI | None = None
    outcome: outcomes.Outcome | None = None
    observed_direction: str = "flat"
    drift_class: str = "none"
    reasons: list[str] = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    paired_summary: str = ""  # the paired per-token delta, or why it was not checked
    # Drift classes the evidence rules out, each with the evidence ({class: why}): what a rung whose
    # delta stays undetermined can still show (temperature: "no framework or semantic drift").
    ruled_out: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        head = f"{self.rung}: abs-diff mean {self.child_mean:.4g}"
        if self.outcome is not None:
            o = self.outcome
            head += (
                f" vs {self.parent} {self.parent_mean:.4g}: delta {self.diff.diff:+.4g} "
                f"[{o.low:+.4g}, {o.high:+.4g}] at {o.confidence:.2%}, effect of interest +/-{o.effect:.3g}"
            )
            if o.direction == "inconclusive":
                head += f"; INCONCLUSIVE: smallest detectable effect {o.detectable:.3g}"
        elif self.diff is not None:
            head += f" vs {self.parent} {self.parent_mean:.4g}: delta {self.diff.diff:+.4g} [{self.diff.low:+.4g}, {self.diff.high:+.4g}]"
        spread = self.replicate_spread()
        if spread:
            head += f"; {spread}"
        if self.paired_summary:
            head += f"; {self.paired_summary}"
        return f"{head}; observed {self.observed_direction}, class {self.drift_class} ({'; '.join(self.reasons)})"

    def replicate_spread(self) -> str:
        """Each side's per-seed means, when the rung was judged on several seeds ('' otherwise)."""
        replicates = self.evidence.get("replicates")
        if not replicates or replicates["count"] <= 1:
            return ""
        sides = []
        for name in (self.rung, self.parent):
            means = " / ".join(f"{entry['mean']:.4g}" for entry in replicates[name].values())
            sides.append(f"{name} per seed {means}")
        return f"{replicates['count']} seeds: " + ", ".join(sides)


def _series(run: Run, warmup: int) -> list[float]:
    return after_warmup(run.series(ABS_DIFF), warmup)[1]


def replicate_runs(rung_id: str, fetch: Callable[..., Run], count: int) -> list[Run]:
    """The rung's run and its replicates: the same spec at seeds seed+1 .. seed+count-1 (the stage's
    `replicates` knob). Replicate 0 is the run itself, so one seed reuses the runs it always had."""
    first = fetch(rung_id)
    if count <= 1:
        return [first]
    seed = int(first.spec.flag("seed") if first.spec.flag("seed") is not None else 1234)  # VIME's default seed
    return [first] + [fetch(rung_id, seed=seed + i) for i in range(1, count)]


def _replicate_problems(runs: list[Run], knobs: Knobs, rung_id: str) -> list[str]:
    problems = []
    for index, run in enumerate(runs):
        label = rung_id if index == 0 else f"{rung_id} (replicate {index}, seed {run.spec.flag('seed')})"
        problems += series_problems(run, ABS_DIFF, knobs, label)
    return problems


def _replicate_series(runs: list[Run], warmup: int) -> list[list[float]]:
    return [_series(run, warmup) for run in runs]


def _grand_mean(series: list[list[float]]) -> float:
    return float(np.mean([np.mean(values) for values in series]))


def replay_is_identity(flags: dict) -> bool:
    return (
        float(flags.get("rollout-temperature", 1.0)) == 1.0
        and float(flags.get("rollout-top-p", 1.0)) >= 1.0
        and int(flags.get("rollout-top-k", -1)) <= 0
    )


def _explained_flags(knobs: Knobs) -> set[str]:
    return set(knobs.classification.precision_flags.flags) | set(knobs.classification.workload_flags.flags)


def changed_flags(child: Run, parent: Run) -> set[str]:
    a, b = child.spec.flags, parent.spec.flags
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def family_members(knobs: Knobs, stage: str, backend: str) -> list[str]:
    """The rungs judged against a parent at `stage` on `backend`: one Holm family. A rung whose
    parent does not run there (at this stage or on this backend) gets the smoke check instead and
    makes no decision."""
    from harness.spec.cluster import skip_reason

    members = []
    for rung_id, rung in sorted(knobs.rungs.items()):
        if rung.parent is None or stage not in rung.stages or stage not in knobs.rungs[rung.parent].stages:
            continue
        if skip_reason(knobs, rung, backend) is None and skip_reason(knobs, knobs.rungs[rung.parent], backend) is None:
            members.append(rung_id)
    return members


def effect_of_interest(knobs: Knobs, parent_mean: float) -> float:
    """The minimum effect of interest E of a parent's (or an A/B baseline's) mean, from the knobs
    rung_min_abs_delta and rung_flat_max_rel_delta: one E for the ladder and the A/B."""
    return outcomes.effect_of_interest(parent_mean, knobs.threshold("rung_min_abs_delta"), knobs.threshold("rung_flat_max_rel_delta"))


def rung_difference(rung: Rung, knobs: Knobs, fetch: Callable[..., Run], replicates: int = 1) -> tuple[stats.DiffCI, float] | None:
    """The rung's delta against its parent (over `replicates` seeds a side) and its effect of
    interest, or None when a run falls short of the completeness knobs (the rung's own judgement
    says why)."""
    warmup = int(knobs.threshold("warmup_steps"))
    children, parents = replicate_runs(rung.id, fetch, replicates), replicate_runs(rung.parent, fetch, replicates)
    if _replicate_problems(children, knobs, rung.id) or _replicate_problems(parents, knobs, rung.parent):
        return None
    parent_series, child_series = _replicate_series(parents, warmup), _replicate_series(children, warmup)
    diff = stats.hierarchical_diff_ci(
        parent_series, child_series, confidence=knobs.threshold("bootstrap_confidence"), seed_effect_alpha=knobs.threshold("seed_effect_alpha")
    )
    return diff, effect_of_interest(knobs, _grand_mean(parent_series))


def family_levels(knobs: Knobs, stage: str, backend: str, fetch: Callable[..., Run]) -> dict[str, outcomes.HolmLevel]:
    """Holm levels of the stage's family. A member that cannot be judged (incomplete run) counts
    with p = 1: it stays in the family size and never helps another decision pass."""
    p_values = {}
    replicates = knobs.stages[stage].replicate_count(backend)
    for rung_id in family_members(knobs, stage, backend):
        judged = rung_difference(knobs.rungs[rung_id], knobs, fetch, replicates)
        p_values[rung_id] = 1.0 if judged is None else outcomes.decision_p_value(*judged)
    return outcomes.holm_levels(p_values, 1.0 - knobs.threshold("bootstrap_confidence"))


def judge_rung(
    rung: Rung,
    knobs: Knobs,
    fetch: Callable[..., Run],
    framework_checks: Callable[[Run], list[str]] | None = None,
    holm: outcomes.HolmLevel | None = None,
    contract_check: Callable[[Run], tuple[str, str]] | None = None,
    replicates: int = 1,
    paired: Callable[[Run, Run], object] | None = None,
    boundary_check: Callable[[Run], tuple[str, str, str | None]] | None = None,
    framework_not_checked: Callable[[Run], list[str]] | None = None,
) -> RungJudgement:
    """`fetch(rung_id, **overrides)` returns a run at the same stage and mode; `replicates` is how many
    seeds a side is judged on (the stage's knob; replicate_runs); `paired(child, parent)` gives the
    paired per-token delta on the parent's recorded tokens (harness.judge.paired), reported beside the
    trajectory delta and deciding nothing; `framework_checks(run)`
    returns the failed framework probes' messages (empty when sample identity and weights agree);
    `holm` is the rung's place in its family (family_levels); without it the rung is a family of one;
    `contract_check(run)` is probe 6 on the run's dumps, (status, verdict): the only evidence on a
    sampling rung where no replay run exists (VIME, records); without it such a rung is undecided.
    `boundary_check(run)` is the run's boundary table, (status "within" | "breaks" | "not checked",
    reason, localised boundary): step 4's evidence; without it what survives step 3 is undecided.
    `framework_not_checked(run)` names the framework probes that could not run on a run; framework
    drift is ruled out (RungJudgement.ruled_out) only when none failed and none went unchecked."""
    warmup = int(knobs.threshold("warmup_steps"))
    child = fetch(rung.id)
    incomplete = series_problems(child, ABS_DIFF, knobs, rung.id)
    child_values = _series(child, warmup)
    if incomplete:
        return RungJudgement(rung.id, rung.parent, float(np.mean(child_values)) if child_values else float("nan"), problems=incomplete)
    judgement = RungJudgement(rung.id, rung.parent, float(np.mean(child_values)))
    judgement.evidence["child_run"] = child.id
    if rung.parent is None:
        # A root's bounds are judged on its first seed; its replicates serve as the parent of the rungs above.
        judgement.reasons.append("root rung: judged against its absolute bounds, not a parent")
        # A root is still a run of the pipeline: a sample or weight mismatch there would make every
        # rung above it meaningless, so it gets the framework probes like any other rung.
        if framework_checks is not None:
            failed = framework_checks(child)
            judgement.evidence["framework_checks"] = {child.id: failed or "pass"}
            if failed:
                judgement.drift_class = "framework"
                judgement.reasons.append(f"framework probe failed on {child.id}: {failed[0]}")
        return judgement
    parent = fetch(rung.parent)
    children, parents = replicate_runs(rung.id, fetch, replicates), replicate_runs(rung.parent, fetch, replicates)
    incomplete = _replicate_problems(children, knobs, rung.id) + _replicate_problems(parents, knobs, rung.parent)
    if incomplete:
        judgement.problems = incomplete
        return judgement
    child_series, parent_series = _replicate_series(children, warmup), _replicate_series(parents, warmup)
    judgement.child_mean, judgement.parent_mean = _grand_mean(child_series), _grand_mean(parent_series)
    judgement.evidence["parent_run"] = parent.id
    judgement.evidence["replicates"] = {
        "count": replicates,
        "rule": "seeds seed .. seed+count-1; delta = mean of the replicate means, two-stage bootstrap over seeds and steps",
        rung.id: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(children, child_series, strict=True)},
        rung.parent: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(parents, parent_series, strict=True)},
    }
    confidence = knobs.threshold("bootstrap_confidence")
    judgement.diff = diff = stats.hierarchical_diff_ci(
        parent_series, child_series, confidence=confidence, seed_effect_alpha=knobs.threshold("seed_effect_alpha")
    )
    effect = effect_of_interest(knobs, judgement.parent_mean)
    if holm is None:
        holm = outcomes.HolmLevel(1, 1, 1.0 - confidence, True, (rung.id,))
    if paired is not None:  # evidence beside the trajectory delta; the decision stays the trajectory's
        measured = paired(child, parent)
        judgement.evidence["paired_delta"] = measured.as_dict() if hasattr(measured, "as_dict") else {"not_checked": measured.reason}
        judgement.paired_summary = measured.summary()
    judgement.outcome = result = outcomes.judge_outcome(diff, effect, holm.confidence, holm.reached)
    judgement.observed_direction = result.direction
    judgement.evidence["decision"] = {
        "outcome": result.direction,
        "effect_of_interest": effect,
        "effect_rule": "max(thresholds.rung_min_abs_delta, thresholds.rung_flat_max_rel_delta x parent mean)",
        "interval": [result.low, result.high],
        "half_width": result.half_width,
        "smallest_detectable_effect": result.detectable,
        "p_value": result.p_value,
        "holm_rank": holm.rank,
        "family_size": holm.family_size,
        "family": list(holm.family),
        "adjusted_alpha": holm.alpha,
        "adjusted_confidence": holm.confidence,
        "holm_reached": holm.reached,
        "margin": _rung_margin(rung, result, diff, effect, child_series, parent_series).as_dict(),
    }
    if not holm.reached:
        judgement.reasons.append(
            f"Holm step-down stopped before rank {holm.rank} of {holm.family_size}: a smaller p-value in the family was not significant"
        )
    if framework_checks is not None:
        for side in children + parents:
            failed = framework_checks(side)
            judgement.evidence.setdefault("framework_checks", {})[side.id] = failed or "pass"
            if failed:
                judgement.drift_class = "framework"
                judgement.reasons.append(f"framework probe failed on {side.id}: {failed[0]}")
                return judgement
        unchecked = [
            f"{side.id}: {what}" for side in children + parents for what in (framework_not_checked(side) if framework_not_checked else ["not asked"])
        ]
        if unchecked:
            judgement.evidence["framework_not_checked"] = unchecked
        else:
            judgement.ruled_out["framework"] = f"framework probes 1-2 (sample identity, weights) pass on all {len(children + parents)} runs"
    family = f"Holm rank {holm.rank} of a family of {holm.family_size}, adjusted alpha {holm.alpha:.3g}"
    if result.direction == "flat":
        judgement.reasons.append(f"delta {diff.diff:+.3g} is no effect: {result.describe()} ({family})")
        _rule_out_every_source(judgement, "the delta is no effect")
        return judgement
    if result.direction == "inconclusive":
        # One side can still be decided: when the interval's upper end stays below +E the rung adds
        # no drift of interest, so no drift source needs explaining (class none), whether or not it
        # lowers the drift. Every drift class names a cause of *added* drift (a mishandled contract
        # or a broken sync only ever adds), so "not up" is enough to rule them out.
        one_sided = outcomes.not_up(diff, effect, 1.0 - confidence, holm.family_size)
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
            return judgement
        judgement.drift_class = "undetermined"
        judgement.reasons.append(f"delta {diff.diff:+.3g}: {result.describe()} ({family}); no drift class is decided on it")
        _contract_on_every_replicate(judgement, rung.id, children, contract_check)
        return judgement
    judgement.reasons.append(f"delta {diff.diff:+.3g} is an effect: {result.describe()} ({family})")
    drifting, steadier = (child, parent) if diff.diff > 0 else (parent, child)
    drifting_rung = rung.id if diff.diff > 0 else rung.parent

    replay_flag = knobs.classification.semantic_replay.flag
    drifting_flags = drifting.spec.flags
    if drifting_flags.get(replay_flag):
        removed = None
        judgement.reasons.append(f"the drifting side already replays the processed contract ({replay_flag})")
        judgement.ruled_out["semantic"] = f"the drifting side replays the rollout's processed contract ({replay_flag})"
    elif replay_is_identity(drifting_flags):
        removed = 0.0
        judgement.reasons.append("processed-logprob replay is the identity here (T=1, top_p=1, top-k off): semantics aligned by construction")
    elif drifting.spec.backend == "embedded":
        replayed = fetch(drifting_rung, **{replay_flag: True})
        # A missing or non-finite step of the replay run makes the rung "not judged", naming it.
        incomplete = series_problems(replayed, ABS_DIFF, knobs, f"{drifting_rung} replaying the processed contract")
        if incomplete:
            judgement.problems = ["not judged: " + "; ".join(incomplete)]
            return judgement
        replayed_values = _series(replayed, warmup)
        # The replay run has the first seed only: it is compared seed for seed with the first seeds'
        # delta (the replicates' delta when the first seeds alone do not show the drift).
        steadier_mean = float(np.mean(_series(steadier, warmup)))
        first_seed_delta = float(np.mean(_series(drifting, warmup))) - steadier_mean
        remaining = float(np.mean(replayed_values)) - steadier_mean
        removed = 1.0 - remaining / (first_seed_delta if first_seed_delta > 0 else abs(diff.diff))
        judgement.evidence.update({"replay_run": replayed.id, "replay_mean": float(np.mean(replayed_values)), "removed_fraction": removed})
        judgement.reasons.append(f"replaying the processed contract on {drifting_rung} removes {removed:.0%} of the delta")
    else:
        # No replay run on this backend: probe 6 on the drifting run's dumps decides the contract or
        # nothing does; a sampling rung is never candidate-operator by elimination of flag names.
        status, verdict = contract_check(drifting) if contract_check is not None else ("not checked", "no contract probe was given")
        judgement.evidence["contract_probe"] = {"run": drifting.id, "status": status, "verdict": verdict}
        if status == "fail":
            judgement.drift_class = "semantic"
            judgement.reasons.append(f"probe 6 on {drifting.id}'s dumps: {verdict}")
            return judgement
        if status != "pass":
            judgement.drift_class = "undecided"
            judgement.reasons.append(f"undecided: needs probe 6 (sampling contract) on {drifting.id}: {verdict}")
            return judgement
        judgement.reasons.append(f"probe 6 passes on {drifting.id}'s dumps: {verdict}")
        judgement.ruled_out["semantic"] = f"probe 6 passes on {drifting.id}: {verdict}"
        removed = None
        unexplained = changed_flags(child, parent) - _explained_flags(knobs)
        if unexplained:
            judgement.drift_class = "undecided"
            judgement.reasons.append(
                f"undecided: not semantic, and the changed flags {sorted(unexplained)} are neither precision nor workload knobs; "
                "what survives needs the numerical probes 3-7, which need probe bundles this backend does not record"
            )
            return judgement
    if removed is not None and removed >= knobs.threshold("semantic_replay_min_removed_fraction"):
        judgement.drift_class = "semantic"
        return judgement
    if removed is not None:
        judgement.ruled_out["semantic"] = (
            f"replaying the processed contract removes {removed:.0%} of the delta "
            f"(< thresholds.semantic_replay_min_removed_fraction {knobs.threshold('semantic_replay_min_removed_fraction'):g})"
        )
    # 4. What survives aligned semantics and the framework checks is numerical: the drifting run's
    # boundary table decides it (harness.attribution.boundaries), never the changed flags' names.
    judgement.evidence["changed_flags"] = sorted(changed_flags(child, parent))
    status, verdict, boundary = boundary_check(drifting) if boundary_check is not None else ("not checked", "no boundary check was given", None)
    judgement.evidence["boundary_table"] = {"run": drifting.id, "status": status, "verdict": verdict, "boundary": boundary}
    if status == "within":
        judgement.drift_class = "expected-numerical"
        judgement.reasons.append(f"the delta survives aligned semantics; {drifting.id}'s boundary table: {verdict}")
    elif status == "breaks":
        judgement.drift_class = "candidate-operator"
        judgement.reasons.append(
            f"the delta survives aligned semantics and framework checks; {drifting.id}'s boundary table localises it at {boundary}: {verdict}"
        )
    else:
        judgement.drift_class = "undecided"
        judgement.reasons.append(f"undecided: needs the boundary table of {drifting.id}: {verdict}")
    return judgement


def _rung_margin(rung: Rung, result: outcomes.Outcome, diff: stats.DiffCI, effect: float, child_series, parent_series):
    """The delta's distance in standard errors from the boundary of the rung's expected direction (or
    of the direction observed, when the rung expects none; NaN when inconclusive), with its sample."""
    answer = rung.expect.direction if rung.expect.direction_expected else result.direction
    sample = {
        "seeds_per_side": [len(child_series), len(parent_series)],
        "steps_per_side": [sum(len(v) for v in child_series), sum(len(v) for v in parent_series)],
        "measured_for": "expected" if rung.expect.direction_expected else "observed",
    }
    if answer not in ("up", "down", "flat"):  # inconclusive and not expected: no boundary to measure from
        return Margin(float("nan"), diff.diff, float("nan"), diff.se, answer, sample)
    return outcome_margin(answer, diff.diff, diff.se, effect, sample)


def _rule_out_every_source(judgement: RungJudgement, why: str) -> None:
    """Class none: the rung adds no drift of interest, so no numerical or contract cause of added drift
    needs explaining. Framework drift is not among them: only probes 1-2 rule that out (a sync fault
    confined to a few rollouts can leave the mean where it was)."""
    for drift_class in ("semantic", "candidate-operator", "expected-numerical"):
        judgement.ruled_out.setdefault(drift_class, why)


def _contract_on_every_replicate(
    judgement: RungJudgement, rung_id: str, children: list[Run], contract_check: Callable[[Run], tuple[str, str]] | None
) -> None:
    """An undetermined delta decides no class, but the sampling contract can still be checked directly:
    probe 6 on each of the rung's own runs (its dumps and probe bundles). Passing on every replicate
    rules semantic drift out; failing on any is semantic drift (probe 6 fails only when replaying the
    rollout's contract removes the drift it measures); a run it could not check rules nothing out."""
    if contract_check is None:
        judgement.evidence["contract_probe"] = {"status": "not checked", "verdict": "no contract probe was given"}
        return
    results = {run.id: contract_check(run) for run in children}
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


def bound_findings(rung: Rung, run: Run, knobs: Knobs) -> list[str]:
    """Every absolute expectation of the rung on its own run: exactly zero at every step
    (expect.exactly_zero_every_step, no tolerance) and the statistical bounds (expect.max_*/min_*)."""
    return exactly_zero_findings(rung, run) + _mean_bound_findings(rung, run, knobs)


def _mean_bound_findings(rung: Rung, run: Run, knobs: Knobs) -> list[str]:
    """The rung's absolute bounds (ladder/<rung>.yaml expect.max_*), each judged on its own run's
    abs-diff after warm-up; one line per bound it breaks, with the figures and the threshold's name."""
    bounds = rung.expect.bound_names()
    if not bounds:
        return []
    steps, values = after_warmup(run.series(ABS_DIFF), int(knobs.threshold("warmup_steps")))
    if len(values) < 3:
        return [f"{rung.id}: only {len(values)} finite abs-diff values after warm-up; bounds {sorted(bounds)} not judged"]
    summary = stats.summarize(values, warmup=0, steps=steps)
    low, high = stats.block_bootstrap_mean_ci(values, confidence=knobs.threshold("bootstrap_confidence"))
    observed = {
        "max_abs_diff": summary.mean,
        "max_rel_ci_halfwidth": (high - low) / 2 / summary.mean if summary.mean else float("inf"),
        "max_rel_trend": abs(summary.slope) * (steps[-1] - steps[0]) / summary.mean if summary.mean else float("inf"),
    }
    observed["min_abs_diff"] = summary.mean
    what = {
        "max_abs_diff": "mean abs-diff",
        "max_rel_ci_halfwidth": "CI half-width / mean",
        "max_rel_trend": "trend over the run / mean",
        "min_abs_diff": "mean abs-diff",
    }
    figures = (
        f"mean {summary.mean:.4g}, CI [{low:.4g}, {high:.4g}], trend {observed['max_rel_trend']:.0%} of the mean "
        f"over steps {steps[0]}-{steps[-1]}, per-step CV {summary.cv:.2f}"
    )
    findings = []
    for bound, name in bounds.items():
        limit = knobs.threshold(name)
        is_floor = bound.startswith("min_")
        if not (observed[bound] >= limit if is_floor else observed[bound] <= limit):
            findings.append(
                f"{rung.id}: {what[bound]} {observed[bound]:.4g} {'<' if is_floor else '>'} thresholds.{name} {limit:g} "
                f"(ladder/{rung.id}.yaml expect.{bound}); {figures}"
            )
    return findings


def expectation_findings(rung: Rung, judgement: RungJudgement, run: Run, knobs: Knobs) -> list[str]:
    """What the rung file expects that the judgement or the run contradicts: the one direction against
    the parent, the one drift class, the classes the evidence must rule out, then the rung's absolute
    bounds. An answer the file marks not-expected (knobs/design.yaml says why) is judged and reported,
    never checked here. Empty: as expected."""
    findings = []
    expected = rung.expect
    if rung.parent is not None and expected.direction_expected and judgement.observed_direction != expected.direction:
        observed = judgement.observed_direction
        if judgement.outcome is not None and observed == "inconclusive":
            observed += f" (smallest detectable effect {judgement.outcome.detectable:.3g}, effect of interest {judgement.outcome.effect:.3g})"
        findings.append(f"expected direction {expected.direction!r} against {rung.parent} (ladder/{rung.id}.yaml), observed {observed}")
    # The class is checked on a root too: its framework probes decide it (the fp32 floor: none).
    if expected.class_expected and judgement.drift_class != expected.drift_class:
        findings.append(f"expected drift class {expected.drift_class!r} (ladder/{rung.id}.yaml), decided {judgement.drift_class!r}")
    # Classes the rung must rule out by evidence, whatever class (or none) the delta decides.
    for drift_class in expected.rules_out:
        if drift_class not in judgement.ruled_out:
            findings.append(
                f"expected {drift_class} drift ruled out (ladder/{rung.id}.yaml expect.rules_out), "
                f"but no evidence rules it out (decided class {judgement.drift_class!r})"
            )
    return findings + bound_findings(rung, run, knobs)
