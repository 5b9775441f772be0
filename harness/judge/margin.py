"""How far a judged answer sits from its decision boundary, in standard errors of its estimate.

A verdict is only as good as its distance from the line that would flip it: an interval that clears
its boundary by 0.001 on one machine falls on the other side on the next seed. Every judged answer
(a ladder rung's outcome, an acceptance bound, an A/B question) records

    margin = (estimate - boundary) / SE - critical     signed so that positive is the side the answer is on,

with the sample the estimate rests on (seeds, steps, tokens). `critical` is how many standard errors
the decision itself asks for: an answer decided by an interval (estimate +/- t(df) x SE at its
Holm-adjusted level) flips where its interval's edge reaches the boundary, t(df) SE from it, not
where the estimate does (an answer 7.3 SE past its effect boundary can be inconclusive when its
interval, on 2 degrees of freedom, needs 7.65); an answer decided on a point
estimate has critical 0. The experiment page and the summary flag an expected
answer whose margin is under thresholds.min_margin_se (docs/statistics.md).

Boundaries, for an estimate d with standard error se, the critical value c and a minimum effect of interest E:
  up    d > +E             margin (d - E) / se - c
  down  d < -E             margin (-d - E) / se - c
  flat  -E <= d <= +E      margin (E - |d|) / se - c
  non-inferiority d >= -M  margin (d + M) / se - c   (the A/B's reward question, M its allowed drop)
  an upper bound  v <= L   margin (L - v) / se - c;  a lower bound  v >= L  margin (v - L) / se - c
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

__all__ = ["Margin", "outcome_margin", "bound_margin", "noninferiority_margin", "below_minimum", "interval_critical"]

DIRECTIONS = ("up", "down", "flat")


@dataclass(frozen=True)
class Margin:
    """`se_units` is the signed distance from `boundary` in standard errors (positive: on the side of
    the answer given); NaN when the estimate has no standard error (nothing to measure it with)."""

    se_units: float
    estimate: float
    boundary: float
    se: float
    answer: str  # the answer the margin is measured for (up, down, flat, pass, ...)
    sample: dict = field(default_factory=dict)  # seeds, steps, tokens the estimate rests on
    critical: float = 0.0  # standard errors the decision asks for beyond the boundary (t(df) of its interval; 0: a point decision)

    def describe(self) -> str:
        if not math.isfinite(self.se_units):
            return f"margin not measured (standard error {self.se:.3g})"
        if self.critical:
            return f"margin {self.se_units:+.1f} SE beyond what its decision needs ({self.critical:.2f} SE past the boundary {self.boundary:+.3g})"
        return f"margin {self.se_units:+.1f} SE from its boundary {self.boundary:+.3g}"

    def as_dict(self) -> dict:
        return asdict(self)


def _ratio(distance: float, se: float, critical: float = 0.0) -> float:
    if not (math.isfinite(distance) and math.isfinite(se)):
        return float("nan")
    if se <= 0:
        return math.copysign(float("inf"), distance) if distance else float("nan")
    return distance / se - critical


def interval_critical(low: float, high: float, se: float) -> float:
    """The standard errors an interval-decided answer needs past its boundary: the interval's
    half-width over its standard error (t(df) at the interval's level); 0 when it cannot be read."""
    if not all(math.isfinite(v) for v in (low, high, se)) or se <= 0:
        return 0.0
    return (high - low) / 2 / se


def outcome_margin(answer: str, estimate: float, se: float, effect: float, sample: dict | None = None, critical: float = 0.0) -> Margin:
    """The margin of `answer` (up, down or flat against +/-effect). For up and down the boundary is
    the effect of interest on that side; for flat it is the nearer of +/-effect."""
    if answer not in DIRECTIONS:
        raise ValueError(f"answer={answer!r}: a margin is measured for one of {DIRECTIONS}")
    if answer == "up":
        boundary, distance = effect, estimate - effect
    elif answer == "down":
        boundary, distance = -effect, -estimate - effect
    else:
        boundary = effect if estimate >= 0 else -effect
        distance = effect - abs(estimate)
    return Margin(_ratio(distance, se, critical), estimate, boundary, se, answer, dict(sample or {}), critical)


def noninferiority_margin(estimate: float, se: float, allowed_drop: float, sample: dict | None = None, critical: float = 0.0) -> Margin:
    """Non-inferiority (candidate minus baseline at least -allowed_drop)."""
    return Margin(_ratio(estimate + allowed_drop, se, critical), estimate, -allowed_drop, se, "not worse", dict(sample or {}), critical)


def bound_margin(value: float, se: float, limit: float, upper: bool, sample: dict | None = None, critical: float = 0.0) -> Margin:
    """An absolute bound on an estimate: value <= limit (upper) or value >= limit."""
    distance = (limit - value) if upper else (value - limit)
    return Margin(_ratio(distance, se, critical), value, limit, se, "within bound", dict(sample or {}), critical)


def below_minimum(margin: Margin | dict | None, minimum: float) -> bool:
    """True when a measured margin is under `minimum` (a NaN margin is not measured, and says so
    elsewhere; it is flagged too: an answer whose distance cannot be measured is not far from it)."""
    if margin is None:
        return False
    value = margin["se_units"] if isinstance(margin, dict) else margin.se_units
    return not (isinstance(value, (int, float)) and value >= minimum)
