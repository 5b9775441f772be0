"""The sample a question needs: from A/A runs (the same spec at the design seeds), how many seeds a side
(or pairs) bring its expected answer to a margin of at least the target, in standard errors of its
estimate, under the judge's own estimator (harness.judge.variance). Numbers in, numbers out:
tools/design_sample.py feeds it the design seeds' runs and writes knobs/design.yaml.

A side of a comparison is R runs (seeds) of S steps. The judge estimates the variance of its mean as
the run means' spread over the seeds divided by R, with R - 1 degrees of freedom, so the design needs
one figure a spec: `var_run`, the variance of one run's mean across seeds, measured on its A/A runs.
It is split into the steps' own noise (`within`, overlapping batch means of each run) and what the
seeds add (`seed` = var_run - within, by moments, not truncated), so a run of other length S can be
sized as seed + within x S0 / S. The difference of two sides' grand means then has

    SE(R) = sqrt(var_run_a / R + var_run_b / R)

and its expected margin is (|delta| - E) / SE for up or down, (E - |delta|) / SE for flat, and
(delta + M) / SE for a non-inferiority question with allowed drop M (harness.judge.margin).

The answer must also clear the decision rule the judge applies: the interval at the family's
Holm-adjusted level, t(df) x SE, where df is Welch-Satterthwaite's over the two sides' R - 1. And the
judge divides by the SE it estimates from those degrees of freedom, which scatters around the true one
as sqrt(chi2(df) / df). So the design asks, for the judged margin to reach `required` with about 95%
probability on each of the two (the estimate low by `target - required` SE; the SE estimated high at its
95% quantile u(df) = sqrt(chi2_0.95(df) / df)):

    distance / SE - (target - required)  >=  u(df) x (required + t(df))

A spec's var_run comes from the design's own seeds (R0 - 1 degrees of freedom) and from no other spec:
no pool, so a planted fault's spread never sizes another question.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as scipy_stats

__all__ = ["SideVariance", "Need", "side_variance", "needed_sample", "needed_pairs", "relative_sd", "se_scatter", "welch_df"]

# Beyond this many seeds a side the design stops looking: it reports "more than MAX_SEEDS".
MAX_SEEDS = 64
# The quantile of the judge's own SE estimate the design sizes for (see the module docstring).
SE_QUANTILE = 0.95


@dataclass(frozen=True)
class SideVariance:
    """One spec measured at R0 seeds of S0 steps: its mean and the variance of one run's mean across seeds."""

    mean: float
    seeds: int
    steps: int
    within: float  # the steps' own noise in one run's mean (overlapping batch means), averaged over seeds
    seed: float  # what the seeds add beyond `within`: var_run - within (moments; may be negative)
    run_means: tuple[float, ...] = ()

    @property
    def between(self) -> float:
        """var_run at the measured length: the run means' sample variance over the seeds."""
        return self.seed + self.within

    def run_variance(self, steps: int | None = None) -> float:
        """One run's mean's variance across seeds at `steps` judged steps (the measured length by default)."""
        if steps is None or steps == self.steps:
            return self.between
        return max(self.seed, 0.0) + self.within * self.steps / steps

    def as_dict(self) -> dict:
        return asdict(self)


def side_variance(run_means: Sequence[float], within_variances: Sequence[float], steps: int) -> SideVariance:
    """From each design seed's run mean and its within-run variance (harness.judge.variance.run_noise)."""
    means = np.asarray(run_means, dtype=float)
    within = float(np.mean(within_variances)) if len(within_variances) else float("nan")
    between = float(np.var(means, ddof=1)) if len(means) > 1 else float("nan")
    seed = between - within if math.isfinite(between) else float("nan")
    return SideVariance(float(means.mean()), len(means), int(steps), within, seed, tuple(float(m) for m in means))


def relative_sd(side: SideVariance) -> float:
    """The spec's seed-to-seed spread: the standard deviation of its run means over their mean."""
    if side.seeds < 2 or side.mean == 0:
        return float("nan")
    return float(np.std(side.run_means, ddof=1)) / abs(side.mean)


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


def se_scatter(df: float) -> float:
    """u(df): how much larger than the true SE the judge's estimate comes out at its SE_QUANTILE, for
    an SE estimated with df degrees of freedom (sqrt(chi2(df) / df))."""
    return math.sqrt(float(scipy_stats.chi2.ppf(SE_QUANTILE, df)) / df)


def welch_df(variances: Sequence[float], dfs: Sequence[float]) -> float:
    """Welch-Satterthwaite's degrees of freedom of a sum of independent variance estimates."""
    total = sum(variances)
    denominator = sum(v * v / d for v, d in zip(variances, dfs, strict=True) if v > 0)
    return total * total / denominator if denominator > 0 else min(dfs)


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
    """Pairs for an A/B question judged on the pairs' mean difference (harness.judge.variance.paired_diff_ci):
    `difference` is one "side" whose runs are the pairs (each pair's mean step-by-step difference);
    R pairs give R - 1 degrees of freedom, at least 2 pairs."""
    distance = boundary_distance(answer, difference.mean, effect)
    one_pair = difference.run_variance()

    def se(pairs: int) -> float:
        return math.sqrt(max(one_pair, 0.0) / pairs)

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
    required_margin: float = 3.0,
) -> Need:
    """Seeds a side for `answer` (up, down, flat against +/-effect; `not worse` with allowed drop
    `effect`) on the difference b - a, each side its seeds' spread with R - 1 degrees of freedom."""
    steps = steps or a.steps
    delta = (b.mean if b is not None else 0.0) - a.mean
    distance = boundary_distance(answer, delta, effect)
    run_variances = [max(a.run_variance(steps), 0.0), *([max(b.run_variance(steps), 0.0)] if b is not None else [])]
    one_pair = sum(run_variances)

    def se(seeds: int) -> float:
        return math.sqrt(one_pair / seeds)

    measured = distance / se(a.seeds) if one_pair > 0 else float("inf")
    found = None
    if distance > 0:
        for seeds in range(2, MAX_SEEDS + 1):
            # The judged margin is counted from where the decision flips (harness.judge.margin): the
            # critical value of the judge's interval first, then the target margin beyond it, at the
            # degrees of freedom the judge's Welch interval will have with this many seeds.
            df = welch_df(run_variances, [seeds - 1] * len(run_variances))
            if _clears(distance, se(seeds), df, family_alpha, target_margin, required_margin):
                found = seeds
                break
    return Need(answer, delta, distance, measured, target_margin, found, steps, se(found) if found else None)
