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

import copy
from dataclasses import dataclass, field

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge import stats
from harness.judge.completeness import series_problems
from harness.judge.evidence import BoundaryResult, Need, RungEvidence
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
    # Evidence a step reached without (harness.judge.evidence.Need): not a verdict until it is given.
    needs: list[Need] = field(default_factory=list)

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


def rung_difference(rung: Rung, knobs: Knobs, children: list[Run], parents: list[Run]) -> tuple[stats.DiffCI, float] | None:
    """The rung's delta against its parent (its runs and its parent's, one a seed) and its effect of
    interest, or None when a run falls short of the completeness knobs (the rung's own judgement
    says why)."""
    warmup = int(knobs.threshold("warmup_steps"))
    if _replicate_problems(children, knobs, rung.id) or _replicate_problems(parents, knobs, rung.parent):
        return None
    parent_series, child_series = _replicate_series(parents, warmup), _replicate_series(children, warmup)
    diff = stats.hierarchical_diff_ci(
        parent_series, child_series, confidence=knobs.threshold("bootstrap_confidence"), seed_effect_alpha=knobs.threshold("seed_effect_alpha")
    )
    return diff, effect_of_interest(knobs, _grand_mean(parent_series))


def family_levels(knobs: Knobs, differences: dict[str, tuple[stats.DiffCI, float] | None]) -> dict[str, outcomes.HolmLevel]:
    """Holm levels of a stage's family from each member's rung_difference. A member that cannot be
    judged (None: an incomplete run) counts with p = 1: it stays in the family size and never helps
    another decision pass."""
    p_values = {rung_id: 1.0 if judged is None else outcomes.decision_p_value(*judged) for rung_id, judged in differences.items()}
    return outcomes.holm_levels(p_values, 1.0 - knobs.threshold("bootstrap_confidence"))


def first_seed_problems(rung: Rung, knobs: Knobs, child: Run) -> list[str]:
    """Why the rung's own run (first seed) cannot be judged: missing or non-finite steps."""
    return series_problems(child, ABS_DIFF, knobs, rung.id)


def judge(rung: Rung, knobs: Knobs, children: list[Run], parents: list[Run], evidence: RungEvidence, holm: outcomes.HolmLevel | None = None):
    """The rung judged on its runs (`children`, first seed first; `parents`, empty for a root) and the
    evidence: measure, then classify. `holm` is the rung's place in its family (family_levels);
    without it the rung is a family of one. A judgement with `needs` stopped for evidence it lacks."""
    return classify(rung, knobs, measure(rung, knobs, children, parents, holm), children, parents, evidence, holm)


def measure(rung: Rung, knobs: Knobs, children: list[Run], parents: list[Run], holm: outcomes.HolmLevel | None = None) -> RungJudgement:
    """Steps 1-2's numbers: the runs complete, the means, the delta's interval and its outcome against
    the effect of interest at the rung's Holm level. No class is decided here."""
    warmup = int(knobs.threshold("warmup_steps"))
    child = children[0]
    incomplete = first_seed_problems(rung, knobs, child)
    child_values = _series(child, warmup)
    if incomplete:
        return RungJudgement(rung.id, rung.parent, float(np.mean(child_values)) if child_values else float("nan"), problems=incomplete)
    judgement = RungJudgement(rung.id, rung.parent, float(np.mean(child_values)))
    judgement.evidence["child_run"] = child.id
    if rung.parent is None:
        # A root's bounds are judged on its first seed; its replicates serve as the parent of the rungs above.
        judgement.reasons.append("root rung: judged against its absolute bounds, not a parent")
        return judgement
    incomplete = _replicate_problems(children, knobs, rung.id) + _replicate_problems(parents, knobs, rung.parent)
    if incomplete:
        judgement.problems = incomplete
        return judgement
    child_series, parent_series = _replicate_series(children, warmup), _replicate_series(parents, warmup)
    judgement.child_mean, judgement.parent_mean = _grand_mean(child_series), _grand_mean(parent_series)
    judgement.evidence["parent_run"] = parents[0].id
    judgement.evidence["replicates"] = {
        "count": len(children),
        "rule": "seeds seed .. seed+count-1; delta = mean of the replicate means, two-stage bootstrap over seeds and steps",
        rung.id: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(children, child_series, strict=True)},
        rung.parent: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(parents, parent_series, strict=True)},
    }
    judgement.diff = stats.hierarchical_diff_ci(
        parent_series, child_series, confidence=knobs.threshold("bootstrap_confidence"), seed_effect_alpha=knobs.threshold("seed_effect_alpha")
    )
    _decide_outcome(judgement, rung, knobs, _holm_or_alone(holm, rung, knobs), child_series, parent_series)
    return judgement


def _holm_or_alone(holm: outcomes.HolmLevel | None, rung: Rung, knobs: Knobs) -> outcomes.HolmLevel:
    return holm if holm is not None else outcomes.HolmLevel(1, 1, 1.0 - knobs.threshold("bootstrap_confidence"), True, (rung.id,))


def _decide_outcome(judgement: RungJudgement, rung: Rung, knobs: Knobs, holm: outcomes.HolmLevel, child_series, parent_series) -> None:
    """Step 2: up, down, flat or inconclusive against the effect of interest, at the rung's Holm level."""
    diff, effect = judgement.diff, effect_of_interest(knobs, judgement.parent_mean)
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
    if _no_effect_step(judgement, rung, knobs, _holm_or_alone(holm, rung, knobs), children, evidence):
        return judgement
    drifting, drifting_rung = (children[0], rung.id) if judgement.diff.diff > 0 else (parents[0], rung.parent)
    removed = _semantic_step(judgement, rung, knobs, drifting, drifting_rung, children[0], parents[0], evidence)
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
    _numerical_step(judgement, knobs, drifting, children[0], parents[0], evidence)
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
    return True


def _semantic_step(judgement, rung: Rung, knobs: Knobs, drifting: Run, drifting_rung: str, child: Run, parent: Run, evidence: RungEvidence):
    """Step 3: the fraction of the delta that replaying the rollout's processed contract removes (None
    when not measured), or _DECIDED when this step decided the class (or stopped for evidence)."""
    replay_flag = knobs.classification.semantic_replay.flag
    if drifting.spec.flags.get(replay_flag):
        judgement.reasons.append(f"the drifting side already replays the processed contract ({replay_flag})")
        judgement.ruled_out["semantic"] = f"the drifting side replays the rollout's processed contract ({replay_flag})"
        return None
    if replay_is_identity(drifting.spec.flags):
        judgement.reasons.append("processed-logprob replay is the identity here (T=1, top_p=1, top-k off): semantics aligned by construction")
        return 0.0
    if drifting.spec.backend == "embedded":
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
    replayed_values = _series(replayed, warmup)
    # The replay run has the first seed only: it is compared seed for seed with the first seeds'
    # delta (the replicates' delta when the first seeds alone do not show the drift).
    steadier_mean = float(np.mean(_series(steadier, warmup)))
    first_seed_delta = float(np.mean(_series(drifting, warmup))) - steadier_mean
    remaining = float(np.mean(replayed_values)) - steadier_mean
    removed = 1.0 - remaining / (first_seed_delta if first_seed_delta > 0 else abs(judgement.diff.diff))
    judgement.evidence.update({"replay_run": replayed.id, "replay_mean": float(np.mean(replayed_values)), "removed_fraction": removed})
    judgement.reasons.append(f"replaying the processed contract on {drifting_rung} removes {removed:.0%} of the delta")
    return removed


def _contract_probe_decides(judgement, knobs: Knobs, drifting: Run, child: Run, parent: Run, evidence: RungEvidence):
    """No replay run on this backend: probe 6 on the drifting run's dumps decides the contract or
    nothing does; a sampling rung is never candidate-operator by elimination of flag names."""
    if not evidence.contract_probe:
        status, verdict = "not checked", "no contract probe was given"
    elif drifting.id not in evidence.contract:
        judgement.needs.append(Need("contract", drifting.id))
        return _DECIDED
    else:
        status, verdict = evidence.contract[drifting.id].status, evidence.contract[drifting.id].verdict
    judgement.evidence["contract_probe"] = {"run": drifting.id, "status": status, "verdict": verdict}
    if status == "fail":
        judgement.drift_class = "semantic"
        judgement.reasons.append(f"probe 6 on {drifting.id}'s dumps: {verdict}")
        return _DECIDED
    if status != "pass":
        judgement.drift_class = "undecided"
        judgement.reasons.append(f"undecided: needs probe 6 (sampling contract) on {drifting.id}: {verdict}")
        return _DECIDED
    judgement.reasons.append(f"probe 6 passes on {drifting.id}'s dumps: {verdict}")
    judgement.ruled_out["semantic"] = f"probe 6 passes on {drifting.id}: {verdict}"
    unexplained = changed_flags(child, parent) - _explained_flags(knobs)
    if unexplained:
        judgement.drift_class = "undecided"
        judgement.reasons.append(
            f"undecided: not semantic, and the changed flags {sorted(unexplained)} are neither precision nor workload knobs; "
            "what survives needs the numerical probes 3-7, which need probe bundles this backend does not record"
        )
        return _DECIDED
    return None


def _numerical_step(judgement: RungJudgement, knobs: Knobs, drifting: Run, child: Run, parent: Run, evidence: RungEvidence) -> None:
    """Step 4. What survives aligned semantics and the framework checks is numerical: the drifting
    run's boundary table decides it (harness.attribution.boundaries), never the changed flags' names."""
    judgement.evidence["changed_flags"] = sorted(changed_flags(child, parent))
    if not evidence.boundary_table:
        table = BoundaryResult("not checked", "no boundary check was given")
    elif drifting.id not in evidence.boundary:
        judgement.needs.append(Need("boundary", drifting.id))
        return
    else:
        table = evidence.boundary[drifting.id]
    status, verdict, boundary = table.status, table.verdict, table.boundary
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
