"""The boundary envelopes' calibration, from boundary tables of calibration runs (pure: tables in,
figures out; no run is launched here - tools/calibrate_envelopes.py launches and reads them).

A boundary's ratio is what harness.attribution.boundaries judges: mean divergence over mean
envelope, pooled over the boundary's elements, i.e. sum(d) / sum(e). Here each captured sample
brings its own sums, so the ratio gets an interval: a percentile bootstrap over samples
(scipy.stats.bootstrap, paired: a sample's divergence and envelope are resampled together). Over
samples, not tokens, because a sample's tokens move together (one prompt; every position's inputs
depend on the ones before); percentile, not BCa, because BCa's jackknife is undefined on a
boundary whose samples are all equal (an exact-zero divergence on the fp32 floor) and a ratio's
percentile interval is the same whichever way the ratio is written.

The rule for k (`derive_k`): aligned engines reach at most A = the largest upper bound of any
boundary's ratio on the aligned rungs (each rung's runs pooled over the calibration seeds); a
planted fault reaches at least C = the smallest lower bound of a control's ratio at the boundary
it is planted at. k = sqrt(A x C), the geometric midpoint, rounded to two significant digits:
the multiple that is as many times above what aligned engines reach as it is below what the
mildest planted fault does (k / A = C / k), so a judged ratio has to move by the same factor from
either side to be misclassed. No k when C <= A (the calibration cannot separate the two), when a
boundary has fewer than the minimum tokens, or when a ratio is not finite: each says so.

The own-input check's multiple k_own (`derive_own_k`) follows the same rule on each side's own
ratio (mean |y_s - f64(x_s)| over mean |f_s(x_s) - f64(x_s)|, harness.attribution.boundaries):
A_own = the largest upper bound of any side's own ratio at any boundary of the aligned rungs,
C_own = the smallest lower bound of a control's own ratio at its planted boundary and side, over
the fp32-floor controls and the OWN_CONTROL runs (controls at the size of interest on a rung at its
own precision, which only k_own reads: the cross-engine k is derived as before).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

ALIGNED, CONTROL = "aligned", "control"
OWN_CONTROL = "own-control"  # a control read only by the own-input check's k_own


@dataclass(frozen=True)
class SampleSums:
    """One captured sample's share of a boundary: sums of |d| and e over its elements."""

    divergence: float
    envelope: float
    elements: int
    tokens: int  # positions: the response tokens for the LM-head rows, every position for the stream rows


@dataclass
class CalibrationRun:
    """One calibration run's boundary table, per sample (what tools/calibrate_envelopes.py reads)."""

    run: str
    rung: str  # an aligned rung's id, or the control's fault name
    kind: str  # ALIGNED | CONTROL | OWN_CONTROL
    seed: int
    planted_at: str | None = None  # a control's boundary
    boundaries: dict[str, list[SampleSums]] = field(default_factory=dict)
    planted_side: str | None = None  # a control's engine (trainer | rollout)
    # boundary -> side -> per sample (sum of the own residual, sum of the own envelope)
    own: dict[str, dict[str, list[SampleSums]]] = field(default_factory=dict)


@dataclass(frozen=True)
class RatioEstimate:
    tokens: int
    samples: int
    ratio: float
    low: float
    high: float


def ratio_of_sums(divergence: np.ndarray, envelope: np.ndarray, axis: int = -1) -> np.ndarray:
    """sum(d) / sum(e) along axis, as boundaries._ratio reads a mean ratio: 0 where both are 0,
    inf where only the envelope is."""
    d, e = np.sum(divergence, axis=axis), np.sum(envelope, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(e == 0.0, np.where(d == 0.0, 0.0, np.inf), d / np.where(e == 0.0, 1.0, e))
    return np.where(np.isnan(d) | np.isnan(e), np.nan, out)


def boundary_ratio(samples: list[SampleSums], confidence: float, resamples: int, seed: int = 0) -> RatioEstimate:
    """The pooled ratio and its percentile bootstrap interval over samples (module docstring)."""
    d = np.array([s.divergence for s in samples], dtype=float)
    e = np.array([s.envelope for s in samples], dtype=float)
    tokens = int(sum(s.tokens for s in samples))
    ratio = float(ratio_of_sums(d, e))
    if len(samples) < 2 or not math.isfinite(ratio):
        return RatioEstimate(tokens, len(samples), ratio, float("nan"), float("nan"))
    if np.all(d == d[0]) and np.all(e == e[0]):  # every resample is the same sample set: no spread
        return RatioEstimate(tokens, len(samples), ratio, ratio, ratio)
    result = stats.bootstrap(
        (d, e),
        lambda dd, ee, axis=-1: ratio_of_sums(dd, ee, axis),
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return RatioEstimate(tokens, len(samples), ratio, float(result.confidence_interval.low), float(result.confidence_interval.high))


@dataclass
class RungFigures:
    rung: str
    kind: str
    seeds: list[int]
    runs: list[str]
    planted_at: str | None
    boundaries: dict[str, RatioEstimate]
    per_run: dict[str, dict[str, float]]  # run id -> boundary -> that run's own ratio (the seeds' spread)
    planted_side: str | None = None
    own: dict[str, dict[str, RatioEstimate]] = field(default_factory=dict)  # boundary -> side -> own ratio
    own_per_run: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # run -> boundary -> side -> own ratio


def _sums_ratio(samples: list[SampleSums]) -> float:
    return float(ratio_of_sums(np.array([s.divergence for s in samples], dtype=float), np.array([s.envelope for s in samples], dtype=float)))


def rung_figures(runs: list[CalibrationRun], confidence: float, resamples: int) -> list[RungFigures]:
    """Per rung (its runs pooled over the calibration seeds): each boundary's ratio and interval."""
    by_rung: dict[str, list[CalibrationRun]] = {}
    for run in runs:
        by_rung.setdefault(run.rung, []).append(run)
    out = []
    for rung, group in by_rung.items():
        names = list(dict.fromkeys(b for run in group for b in run.boundaries))
        boundaries = {
            name: boundary_ratio([s for run in group for s in run.boundaries.get(name, [])], confidence, resamples, seed=i)
            for i, name in enumerate(names)
        }
        per_run = {run.run: {name: _sums_ratio(samples) for name, samples in run.boundaries.items()} for run in group}
        own_names = list(dict.fromkeys(b for run in group for b in run.own))
        own = {
            name: {
                side: boundary_ratio([s for run in group for s in run.own.get(name, {}).get(side, [])], confidence, resamples, seed=1000 + 2 * i + j)
                for j, side in enumerate(sorted({side for run in group for side in run.own.get(name, {})}))
            }
            for i, name in enumerate(own_names)
        }
        own_per_run = {
            run.run: {name: {side: _sums_ratio(samples) for side, samples in sides.items()} for name, sides in run.own.items()} for run in group
        }
        kinds = {run.kind for run in group}
        planted = {(run.planted_at, run.planted_side) for run in group}
        if len(kinds) != 1 or len(planted) != 1:
            raise ValueError(f"rung {rung}: its runs disagree on kind {sorted(kinds)} or planted boundary {sorted(map(str, planted))}")
        at, side = planted.pop()
        out.append(
            RungFigures(rung, kinds.pop(), sorted({r.seed for r in group}), [r.run for r in group], at, boundaries, per_run, side, own, own_per_run)
        )
    return out


class NoK(ValueError):
    """The calibration figures cannot give a k; the message says why."""


@dataclass(frozen=True)
class DerivedK:
    value: float
    aligned_upper: float  # A
    aligned_at: str  # "rung boundary" where A was reached
    control_lower: float  # C
    control_at: str

    @property
    def factor(self) -> float:
        """k / A = C / k (before rounding): how far k is from either side."""
        return math.sqrt(self.control_lower / self.aligned_upper)


def round_significant(value: float, digits: int = 2) -> float:
    if value == 0.0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


@dataclass(frozen=True)
class Figure:
    """One boundary's recorded figure, as the rule reads it (from RungFigures or from the record)."""

    rung: str
    kind: str
    boundary: str
    tokens: int
    ratio: float
    low: float
    high: float
    planted_at: str | None = None
    side: str | None = None  # an own-input figure's side; None for the cross-engine ratio
    planted_side: str | None = None

    @property
    def where(self) -> str:
        return f"{self.rung} {self.boundary}" + (f" ({self.side})" if self.side else "")


def figures_of(rungs: list[RungFigures]) -> list[Figure]:
    return [Figure(r.rung, r.kind, name, est.tokens, est.ratio, est.low, est.high, r.planted_at) for r in rungs for name, est in r.boundaries.items()]


def own_figures_of(rungs: list[RungFigures]) -> list[Figure]:
    """Each side's own ratio at each boundary, as Figures with their side."""
    return [
        Figure(r.rung, r.kind, name, est.tokens, est.ratio, est.low, est.high, r.planted_at, side, r.planted_side)
        for r in rungs
        for name, sides in r.own.items()
        for side, est in sides.items()
    ]


def derive_k(figures: list[Figure], min_tokens: int) -> DerivedK:
    """k = sqrt(A x C) rounded to two significant digits (module docstring). Raises NoK."""
    aligned = [f for f in figures if f.kind == ALIGNED]
    controls = [f for f in figures if f.kind == CONTROL]
    planted = [f for f in controls if f.boundary == f.planted_at]
    return _midpoint(aligned, controls, planted, min_tokens)


def derive_own_k(figures: list[Figure], min_tokens: int) -> DerivedK:
    """k_own by the same rule on the own-input figures (own_figures_of): A_own over every side and
    boundary of the aligned rungs, C_own at each control's planted boundary and side. Raises NoK."""
    aligned = [f for f in figures if f.kind == ALIGNED]
    controls = [f for f in figures if f.kind in (CONTROL, OWN_CONTROL)]
    planted = [f for f in controls if f.boundary == f.planted_at and f.side == f.planted_side]
    return _midpoint(aligned, controls, planted, min_tokens)


def _midpoint(aligned: list[Figure], controls: list[Figure], planted: list[Figure], min_tokens: int) -> DerivedK:
    if not aligned:
        raise NoK("no aligned rung in the calibration")
    names = {f.rung for f in controls}
    missing = sorted(names - {f.rung for f in planted})
    if not names or missing:
        raise NoK(f"no control measured at its planted boundary ({', '.join(missing) or 'no control in the calibration'})")
    used = aligned + planted
    short = [f"{f.where} ({f.tokens})" for f in used if f.tokens < min_tokens]
    if short:
        raise NoK(f"fewer than {min_tokens} captured tokens at: {', '.join(short)}")
    broken = [f.where for f in used if not all(math.isfinite(v) for v in (f.ratio, f.low, f.high))]
    if broken:
        raise NoK(f"no finite ratio and interval at: {', '.join(broken)}")
    top = max(aligned, key=lambda f: f.high)
    bottom = min(planted, key=lambda f: f.low)
    if bottom.low <= top.high or top.high <= 0.0:
        raise NoK(
            f"the calibration does not separate aligned from planted faults: aligned reach {top.high:.3g} "
            f"({top.where}), the mildest control {bottom.low:.3g} ({bottom.where})"
        )
    value = round_significant(math.sqrt(top.high * bottom.low))
    return DerivedK(value, top.high, top.where, bottom.low, bottom.where)
