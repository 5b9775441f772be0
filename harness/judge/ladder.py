"""One rung against its parent: the isolated delta with a confidence interval, and the drift class
decided from evidence (never from the rung's name).

This module measures (`measure`: the runs complete, the delta's interval, its outcome at the rung's
Holm level; `rung_difference` and `family_levels` for the family); harness.judge.drift_class
decides the class from typed evidence (harness.judge.evidence); harness.judge.expectations holds
the result against the rung file. The runs and the evidence are gathered beforehand
(harness.experiment.evidence); nothing here fetches, probes or launches.

Decision procedure, in the seed's order (rule out framework, then semantics, before numerics):
  1. The rung's run (or its parent's) fails a framework probe (sample/token identity, weight
     version) -> framework, whatever the mean does: a sync fault confined to a few rollouts makes
     a non-stationary series whose mean barely clears the noise, and it is still a framework fault.
  2. The delta's outcome against the rung's minimum effect of interest E (harness.judge.effects: the
     parent's A/A noise band or a user-facing margin, never below rung_min_abs_delta), over seeds
     (harness.judge.variance), at the Holm-adjusted level of the rung's family
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

from dataclasses import dataclass, field

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge import stats, variance
from harness.judge.completeness import series_problems
from harness.judge.effects import Effect, ladder_question, question_effect, seed_prior, spec_key
from harness.judge.evidence import Need
from harness.judge.margin import Margin, interval_critical, outcome_margin
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


def abs_diff_after_warmup(run: Run, warmup: int) -> list[float]:
    return after_warmup(run.series(ABS_DIFF), warmup)[1]


def _replicate_problems(runs: list[Run], knobs: Knobs, rung_id: str) -> list[str]:
    problems = []
    for index, run in enumerate(runs):
        label = rung_id if index == 0 else f"{rung_id} (replicate {index}, seed {run.spec.flag('seed')})"
        problems += series_problems(run, ABS_DIFF, knobs, label)
    return problems


def _replicate_series(runs: list[Run], warmup: int) -> list[list[float]]:
    return [abs_diff_after_warmup(run, warmup) for run in runs]


def _grand_mean(series: list[list[float]]) -> float:
    return float(np.mean([np.mean(values) for values in series]))


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


def effect_of_interest(knobs: Knobs, rung_id: str, parent_mean: float) -> Effect:
    """The rung's minimum effect of interest E at its parent's mean (knobs/effects.yaml ladder/<rung>)."""
    return question_effect(knobs, ladder_question(rung_id), parent_mean)


def rung_delta(rung: Rung, knobs: Knobs, child_series: list[list[float]], parent_series: list[list[float]], mode: str) -> stats.DiffCI:
    """The child's mean over its seeds minus the parent's (harness.judge.variance): a side judged on one
    seed carries the seed variance its spec's A/A runs measured (knobs/effects.yaml)."""
    prior_parent = seed_prior(knobs, spec_key(rung.parent, mode)) if len(parent_series) == 1 else None
    prior_child = seed_prior(knobs, spec_key(rung.id, mode)) if len(child_series) == 1 else None
    return variance.replicated_diff_ci(parent_series, child_series, knobs.threshold("bootstrap_confidence"), prior_parent, prior_child)


def rung_difference(rung: Rung, knobs: Knobs, children: list[Run], parents: list[Run]) -> tuple[stats.DiffCI, float] | None:
    """The rung's delta against its parent (its runs and its parent's, one a seed) and its effect of
    interest, or None when a run falls short of the completeness knobs (the rung's own judgement
    says why)."""
    warmup = int(knobs.threshold("warmup_steps"))
    if _replicate_problems(children, knobs, rung.id) or _replicate_problems(parents, knobs, rung.parent):
        return None
    parent_series, child_series = _replicate_series(parents, warmup), _replicate_series(children, warmup)
    diff = rung_delta(rung, knobs, child_series, parent_series, children[0].spec.mode)
    return diff, effect_of_interest(knobs, rung.id, _grand_mean(parent_series)).value


def family_levels(knobs: Knobs, differences: dict[str, tuple[stats.DiffCI, float] | None]) -> dict[str, outcomes.HolmLevel]:
    """Holm levels of a stage's family from each member's rung_difference. A member that cannot be
    judged (None: an incomplete run) counts with p = 1: it stays in the family size and never helps
    another decision pass."""
    p_values = {rung_id: 1.0 if judged is None else outcomes.decision_p_value(*judged) for rung_id, judged in differences.items()}
    return outcomes.holm_levels(p_values, 1.0 - knobs.threshold("bootstrap_confidence"))


def first_seed_problems(rung: Rung, knobs: Knobs, child: Run) -> list[str]:
    """Why the rung's own run (first seed) cannot be judged: missing or non-finite steps."""
    return series_problems(child, ABS_DIFF, knobs, rung.id)


def measure(rung: Rung, knobs: Knobs, children: list[Run], parents: list[Run], holm: outcomes.HolmLevel | None = None) -> RungJudgement:
    """Steps 1-2's numbers: the runs complete, the means, the delta's interval and its outcome against
    the effect of interest at the rung's Holm level. No class is decided here."""
    warmup = int(knobs.threshold("warmup_steps"))
    child = children[0]
    incomplete = first_seed_problems(rung, knobs, child)
    child_values = abs_diff_after_warmup(child, warmup)
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
        "rule": "seeds seed .. seed+count-1; delta = mean of the replicate means, each side's variance its run means' spread over seeds (harness.judge.variance)",
        rung.id: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(children, child_series, strict=True)},
        rung.parent: {run.id: {"seed": run.spec.flag("seed"), "mean": float(np.mean(v))} for run, v in zip(parents, parent_series, strict=True)},
    }
    judgement.diff = rung_delta(rung, knobs, child_series, parent_series, child.spec.mode)
    _decide_outcome(judgement, rung, knobs, holm_level_or_alone(holm, rung, knobs), child_series, parent_series)
    return judgement


def holm_level_or_alone(holm: outcomes.HolmLevel | None, rung: Rung, knobs: Knobs) -> outcomes.HolmLevel:
    return holm if holm is not None else outcomes.HolmLevel(1, 1, 1.0 - knobs.threshold("bootstrap_confidence"), True, (rung.id,))


def _decide_outcome(judgement: RungJudgement, rung: Rung, knobs: Knobs, holm: outcomes.HolmLevel, child_series, parent_series) -> None:
    """Step 2: up, down, flat or inconclusive against the effect of interest, at the rung's Holm level."""
    diff, band = judgement.diff, effect_of_interest(knobs, rung.id, judgement.parent_mean)
    effect = band.value
    judgement.outcome = result = outcomes.judge_outcome(diff, effect, holm.confidence, holm.reached)
    judgement.observed_direction = result.direction
    judgement.evidence["decision"] = {
        "outcome": result.direction,
        "effect_of_interest": effect,
        "effect_rule": band.rule,
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
    # Measured from where the decision flips: the interval's edge at the boundary, t(df) SE past it.
    return outcome_margin(answer, diff.diff, diff.se, effect, sample, critical=interval_critical(result.low, result.high, diff.se))
