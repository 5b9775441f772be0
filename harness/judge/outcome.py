"""Three outcomes for a difference, and Holm's step-down across the ladder's decisions.

A difference is judged against the minimum effect of interest E (docs/statistics.md):
  up            the whole interval lies above +E,
  down          the whole interval lies below -E,
  flat          the whole interval lies inside [-E, +E],
  inconclusive  otherwise: the run cannot tell an effect from no effect at this level.
"Flat" is an equivalence decision: the data must bound the delta, not merely fail to see it, so a
wide interval around zero is inconclusive, not flat.

Each rung judged against a parent at a stage is one decision of a family; Holm's step-down
(Holm 1979) keeps the family-wise error at 1 - confidence. Every decision's interval is the
bootstrap estimate +/- t(df) x SE of harness.judge.stats, so its p-value is exact for that
interval: p <= alpha exactly when the interval at level 1 - alpha is decisive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as scipy_stats

from harness.judge.stats import DiffCI

__all__ = [
    "OUTCOMES",
    "Outcome",
    "HolmLevel",
    "NotUp",
    "effect_of_interest",
    "decision_p_value",
    "judge_outcome",
    "holm_levels",
    "not_up",
]

OUTCOMES = ("up", "down", "flat", "inconclusive")


@dataclass(frozen=True)
class Outcome:
    direction: str
    effect: float  # the minimum effect of interest E
    low: float
    high: float
    confidence: float  # the level the interval was computed at (Holm-adjusted)
    half_width: float
    # The smallest |delta| this run could have called up or down: E plus the interval half-width.
    detectable: float
    p_value: float

    def describe(self) -> str:
        interval = f"{self.confidence:.2%} interval [{self.low:+.3g}, {self.high:+.3g}]"
        if self.direction == "inconclusive":
            return (
                f"inconclusive: {interval} straddles the effect of interest +/-{self.effect:.3g}; "
                f"smallest effect this run could have detected {self.detectable:.3g} (half-width {self.half_width:.3g})"
            )
        if self.direction == "flat":
            return f"flat: {interval} lies inside the effect of interest +/-{self.effect:.3g}"
        return f"{self.direction}: {interval} excludes the effect of interest {'+' if self.direction == 'up' else '-'}{self.effect:.3g}"


@dataclass(frozen=True)
class HolmLevel:
    """Where one decision stands in its family: Holm rank (1 = smallest p), family size, the
    adjusted alpha for that rank, and whether the step-down reached it (False: an earlier
    decision was not significant, so this one is inconclusive whatever its own p-value)."""

    rank: int
    family_size: int
    alpha: float
    reached: bool
    family: tuple[str, ...] = ()

    @property
    def confidence(self) -> float:
        return 1.0 - self.alpha


def effect_of_interest(parent_mean: float, min_abs_delta: float, flat_max_rel_delta: float) -> float:
    """E = max(min_abs_delta, flat_max_rel_delta x |parent mean|): a delta counts only when it is both
    above the absolute floor and more than that fraction of the parent (harness.judge.effects gives
    each question its fraction)."""
    return max(float(min_abs_delta), float(flat_max_rel_delta) * abs(float(parent_mean)))


def _half_width(diff: DiffCI, confidence: float) -> float:
    return float(scipy_stats.t.ppf(0.5 + confidence / 2, diff.df)) * diff.se


def decision_p_value(diff: DiffCI, effect: float) -> float:
    """Two-sided p-value of the decision the data point to: 'beyond +/-E' when |delta| > E, 'inside
    +/-E' otherwise. p <= alpha exactly when the (1 - alpha) interval is decisive."""
    if not (math.isfinite(diff.se) and math.isfinite(diff.df)):
        return 1.0
    distance = abs(abs(diff.diff) - effect)
    if diff.se == 0:
        return 0.0 if distance > 0 else 1.0
    return float(2 * scipy_stats.t.sf(distance / diff.se, diff.df))


def judge_outcome(diff: DiffCI, effect: float, confidence: float, reached: bool = True) -> Outcome:
    """The outcome of `diff` at `confidence` against the effect of interest. `reached` False (Holm
    stopped before this decision) makes it inconclusive whatever the interval shows."""
    half = _half_width(diff, confidence) if diff.se > 0 else 0.0
    low, high = diff.diff - half, diff.diff + half
    if not reached:
        direction = "inconclusive"
    elif low > effect:
        direction = "up"
    elif high < -effect:
        direction = "down"
    elif -effect <= low and high <= effect:
        direction = "flat"
    else:
        direction = "inconclusive"
    return Outcome(direction, effect, low, high, confidence, half, effect + half, decision_p_value(diff, effect))


def holm_levels(p_values: dict[str, float], alpha: float) -> dict[str, HolmLevel]:
    """Holm's step-down: sort the p-values, the k-th smallest is tested at alpha / (m - k + 1); the
    first that fails stops the procedure and every later decision is inconclusive. Ties keep the
    names' order so the result is deterministic."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha}: expected a probability in (0, 1)")
    order = sorted(p_values, key=lambda name: (p_values[name], name))
    size, reached, levels = len(order), True, {}
    for rank, name in enumerate(order, start=1):
        level = alpha / (size - rank + 1)
        levels[name] = HolmLevel(rank, size, level, reached, tuple(order))
        reached = reached and p_values[name] <= level
    return levels


@dataclass(frozen=True)
class NotUp:
    """A one-sided decision for an inconclusive delta: does the rung add no drift of interest?
    `upper` is the one-sided upper confidence bound of the delta at `confidence`."""

    decided: bool
    upper: float
    effect: float
    confidence: float

    def describe(self) -> str:
        verdict = "below" if self.decided else "not below"
        return f"one-sided {self.confidence:.2%} upper bound {self.upper:+.3g} is {verdict} +{self.effect:.3g}"


def not_up(diff: DiffCI, effect: float, alpha: float, family_size: int) -> NotUp:
    """H0: delta >= +E (the rung adds drift of interest) against delta < +E, at Bonferroni's
    alpha / family_size: stricter than any Holm rank, and independent of where the step-down
    stopped, because it is a different hypothesis from the rung's two-sided decision."""
    confidence = 1.0 - alpha / max(1, family_size)
    if not (math.isfinite(diff.se) and math.isfinite(diff.df)):
        return NotUp(False, float("inf"), effect, confidence)
    upper = diff.diff + float(scipy_stats.t.ppf(confidence, diff.df)) * diff.se
    return NotUp(upper < effect, upper, effect, confidence)
