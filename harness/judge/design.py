"""The sample a question needs: from variance measured on A/A runs (the same spec at other seeds), how
many seeds a side (and steps a run) bring its expected answer to a margin of at least the target, in
standard errors of its estimate. Numbers in, numbers out: tools/design_sample.py feeds it the design
seeds' runs and writes knobs/design.yaml.

A side of a comparison is R runs (seeds) of S steps. A run's mean varies between seeds by
    var_run = seed + within x S0 / S
where `within` is the block-bootstrap variance of one run's mean at its S0 steps and `seed` is what
the seeds add on top (the between-seed variance of the run means, less the part their steps explain;
never below zero). The difference of two sides' grand means then has
    SE(R, S) = sqrt(var_run_a / R + var_run_b / R)
and its expected margin is (|delta| - E) / SE for up or down, (E - |delta|) / SE for flat, and
(delta + M) / SE for a non-inferiority question with allowed drop M (harness.judge.margin).

The answer must also clear the decision rule the judge applies: the interval at the family's
Holm-adjusted level, t(df) x SE. The judge's df is Welch-Satterthwaite's over the two sides
(harness.judge.stats.hierarchical_diff_ci), each side R - 1 when its seeds disagree and large
otherwise: about R - 1 when one side's seed spread dominates (fp8-rollout against near-aligned), not
2 (R - 1). And the judge divides by the SE it estimates from those R - 1 degrees of freedom, which
scatters around the true one as sqrt(chi2(df) / df): at the seed sweep's offset +300 under the AVX2
settings fp8-rollout's three seeds spread 1.7x what the design seeds had, the 95% quantile of that
scatter at df = 2. So the design asks, for the judged margin to reach `required` with about 95%
probability on each of the two (the estimate low by `target - required` SE; the SE estimated high at
its 95% quantile u(df) = sqrt(chi2_0.95(df) / df)):

    distance / SE - (target - required)  >=  u(df) x (required + t(df))

which is the plain rule distance / SE - t(df) >= target when u = 1.

A side's seed variance comes from the design's three seeds, an estimate with 2 degrees of freedom:
the tool floors it at the seed spread pooled over every measured side (`with_seed_floor`, tens of
degrees of freedom), so a rung whose three design seeds happened to agree is not sized as if seeds
did not matter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats as scipy_stats

__all__ = ["SideVariance", "Need", "side_variance", "with_seed_floor", "needed_sample", "needed_pairs", "relative_seed_spread", "se_scatter"]

# Beyond this many seeds a side the design stops looking: it reports "more than MAX_SEEDS".
MAX_SEEDS = 64
# The degrees of freedom of a side whose seeds agree (the judge then uses its steps' noise: tens of
# blocks a run); the design's stand-in for "large".
WITHIN_DF = 200.0
# The quantile of the judge's own SE estimate the design sizes for (see the module docstring).
SE_QUANTILE = 0.95


@dataclass(frozen=True)
class SideVariance:
    """One spec measured at R0 seeds of S0 steps: its mean and the two parts of a run mean's variance."""

    mean: float
    seeds: int
    steps: int
    within: float  # variance of one run's mean from its own steps (block bootstrap), averaged over seeds
    seed: float  # what the seeds add beyond `within` (between-seed variance of the run means, less within)
    run_means: tuple[float, ...] = ()

    def run_variance(self, steps: int | None = None) -> float:
        steps = steps or self.steps
        return self.seed + self.within * self.steps / steps

    @property
    def seed_effect(self) -> bool:
        return self.seed > 0

    def as_dict(self) -> dict:
        return asdict(self)


def side_variance(run_means: Sequence[float], within_variances: Sequence[float], steps: int) -> SideVariance:
    """From each design seed's run mean and the bootstrap variance of that mean."""
    means = np.asarray(run_means, dtype=float)
    within = float(np.mean(within_variances)) if len(within_variances) else float("nan")
    between = float(np.var(means, ddof=1)) if len(means) > 1 else float("nan")
    seed = max(0.0, between - within) if math.isfinite(between) else 0.0
    return SideVariance(float(means.mean()), len(means), int(steps), within, seed, tuple(float(m) for m in means))


@dataclass(frozen=True)
class Need:
    """What a question needs. `seeds` is None when no R up to MAX_SEEDS reaches the target (for
    instance a delta that sits on its effect of interest: no sample moves it off the boundary)."""

    answer: str
    delta: float
    boundary_distance: float  # |delta| - E, E - |delta| or delta + M: what the margin divides by SE
    margin_at_measured: float  # the expected margin with the design's own seeds (R0 a side)
    target: float
    seeds: int | None
    steps: int
    se_at_need: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def with_seed_floor(side: SideVariance, relative_spread: float) -> SideVariance:
    """The side with its seed variance at least (relative_spread x its mean)^2: the pooled seed spread
    as a floor under an estimate from a few seeds."""
    floor = (relative_spread * side.mean) ** 2 if math.isfinite(relative_spread) else 0.0
    return replace(side, seed=max(side.seed, floor))


def se_scatter(df: float) -> float:
    """u(df): how much larger than the true SE the judge's estimate comes out at its SE_QUANTILE, for
    an SE estimated with df degrees of freedom (sqrt(chi2(df) / df))."""
    return math.sqrt(float(scipy_stats.chi2.ppf(SE_QUANTILE, df)) / df)


def welch_df(variances: Sequence[float], dfs: Sequence[float]) -> float:
    """Welch-Satterthwaite's degrees of freedom of a sum of independent variance estimates."""
    total = sum(variances)
    denominator = sum(v * v / d for v, d in zip(variances, dfs, strict=True) if v > 0)
    return total * total / denominator if denominator > 0 else min(dfs)


def _side_df(side: SideVariance | None, seeds: int) -> float:
    return float(seeds - 1) if side is not None and side.seed_effect else WITHIN_DF


def _clears(distance: float, se: float, df: float, family_alpha: float, target: float, required: float) -> bool:
    """The module docstring's rule for one sample size."""
    if df < 1 or se <= 0:
        return df >= 1 and distance > 0
    critical = float(scipy_stats.t.ppf(1 - family_alpha / 2, df))
    return distance / se - (target - required) >= se_scatter(df) * (required + critical)


def boundary_distance(answer: str, delta: float, effect: float) -> float:
    """How far `delta` lies inside `answer`'s region: |delta| - E, E - |delta| or delta + M."""
    if answer == "up":
        return delta - effect
    if answer == "down":
        return -delta - effect
    if answer == "flat":
        return effect - abs(delta)
    if answer == "not worse":
        return delta + effect
    raise ValueError(f"answer={answer!r}: expected up, down, flat or 'not worse'")


def needed_pairs(
    answer: str, difference: SideVariance, effect: float, target_margin: float, family_alpha: float, required_margin: float = 3.0
) -> Need:
    """Pairs for an A/B question judged on the pairs' mean difference (harness.judge.ab._compare).

    `difference` is one "side" whose runs are the pairs: each pair's mean paired difference, its
    step-level variance, and what the seeds add between pairs. The judge's interval over R pairs
    falls back to the pairs' own spread, with R - 1 degrees of freedom, whenever the pairs disagree
    beyond their steps' noise (stats.replicate_side); the design cannot rule that out in advance
    (it happened at seed offset +400 with 3 pairs: t = 4.30 made a 4.2 SE distance inconclusive), so
    it asks for R - 1 degrees of freedom always, at least 2 pairs, and sizes for the pairs' SE as the
    judge will estimate it (the module docstring's rule)."""
    distance = boundary_distance(answer, difference.mean, effect)
    one_pair = difference.run_variance()

    def se(pairs: int) -> float:
        return math.sqrt(one_pair / pairs)

    measured = distance / se(difference.seeds) if one_pair > 0 else float("inf")
    found = None
    if distance > 0:
        for pairs in range(2, MAX_SEEDS + 1):
            if _clears(distance, se(pairs), pairs - 1, family_alpha, target_margin, required_margin):
                found = pairs
                break
    return Need(answer, difference.mean, distance, measured, target_margin, found, difference.steps, se(found) if found else None)


def needed_sample(
    answer: str,
    a: SideVariance,
    b: SideVariance | None,
    effect: float,
    target_margin: float,
    family_alpha: float,
    steps: int | None = None,
    paired_variance: float | None = None,
    required_margin: float = 3.0,
) -> Need:
    """Seeds a side for `answer` (up, down, flat against +/-effect; `not worse` with allowed drop
    `effect`) on the difference b - a. With `paired_variance` (an A/B paired step by step) the
    difference's variance for one pair is given directly and divides by R."""
    steps = steps or a.steps
    delta = (b.mean if b is not None else 0.0) - a.mean
    distance = boundary_distance(answer, delta, effect)
    one_pair = paired_variance if paired_variance is not None else a.run_variance(steps) + (b.run_variance(steps) if b is not None else 0.0)
    seed_effect = a.seed_effect or (b is not None and b.seed_effect)

    def se(seeds: int) -> float:
        return math.sqrt(one_pair / seeds)

    measured = distance / se(a.seeds) if one_pair > 0 else float("inf")
    found = None
    if distance > 0:
        for seeds in range(2 if seed_effect else 1, MAX_SEEDS + 1):
            # The judged margin is counted from where the decision flips (harness.judge.margin): the
            # critical value of the judge's interval first, then the target margin beyond it, at the
            # degrees of freedom the judge's Welch interval will have with this many seeds.
            if paired_variance is not None:
                df = _side_df(a if seed_effect else None, seeds)
            else:
                run_variances = [a.run_variance(steps), *([b.run_variance(steps)] if b is not None else [])]
                df = welch_df(run_variances, [_side_df(a, seeds), *([_side_df(b, seeds)] if b is not None else [])])
            if _clears(distance, se(seeds), df, family_alpha, target_margin, required_margin):
                found = seeds
                break
    return Need(answer, delta, distance, measured, target_margin, found, steps, se(found) if found else None)


def relative_seed_spread(sides: Sequence[SideVariance]) -> float:
    """The pooled coefficient of variation of a run's mean across seeds (each side's sample standard
    deviation of its run means over its grand mean, pooled by degrees of freedom): how much a change
    of seed alone moves one run's mean, relative to it."""
    num = den = 0.0
    for side in sides:
        if side.seeds < 2 or side.mean == 0:
            continue
        cv = float(np.std(side.run_means, ddof=1)) / abs(side.mean)
        num += (side.seeds - 1) * cv**2
        den += side.seeds - 1
    return math.sqrt(num / den) if den else float("nan")
