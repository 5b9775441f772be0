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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

ALIGNED, CONTROL = "aligned", "control"


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
    kind: str  # ALIGNED | CONTROL
    seed: int
    planted_at: str | None = None  # a control's boundary
    boundaries: dict[str, list[SampleSums]] = field(default_factory=dict)


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
        per_run = {
            run.run: {
                name: float(
                    ratio_of_sums(np.array([s.divergence for s in samples], dtype=float), np.array([s.envelope for s in samples], dtype=float))
                )
                for name, samples in run.boundaries.items()
            }
            for run in group
        }
        kinds = {run.kind for run in group}
        planted = {run.planted_at for run in group}
        if len(kinds) != 1 or len(planted) != 1:
            raise ValueError(f"rung {rung}: its runs disagree on kind {sorted(kinds)} or planted boundary {sorted(map(str, planted))}")
        out.append(RungFigures(rung, kinds.pop(), sorted({r.seed for r in group}), [r.run for r in group], planted.pop(), boundaries, per_run))
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


def figures_of(rungs: list[RungFigures]) -> list[Figure]:
    return [Figure(r.rung, r.kind, name, est.tokens, est.ratio, est.low, est.high, r.planted_at) for r in rungs for name, est in r.boundaries.items()]


def derive_k(figures: list[Figure], min_tokens: int) -> DerivedK:
    """k = sqrt(A x C) rounded to two significant digits (module docstring). Raises NoK."""
    aligned = [f for f in figures if f.kind == ALIGNED]
    planted = [f for f in figures if f.kind == CONTROL and f.boundary == f.planted_at]
    if not aligned:
        raise NoK("no aligned rung in the calibration")
    controls = {f.rung for f in figures if f.kind == CONTROL}
    missing = sorted(controls - {f.rung for f in planted})
    if not controls or missing:
        raise NoK(f"no control measured at its planted boundary ({', '.join(missing) or 'no control in the calibration'})")
    used = aligned + planted
    short = [f"{f.rung} {f.boundary} ({f.tokens})" for f in used if f.tokens < min_tokens]
    if short:
        raise NoK(f"fewer than {min_tokens} captured tokens at: {', '.join(short)}")
    broken = [f"{f.rung} {f.boundary}" for f in used if not all(math.isfinite(v) for v in (f.ratio, f.low, f.high))]
    if broken:
        raise NoK(f"no finite ratio and interval at: {', '.join(broken)}")
    top = max(aligned, key=lambda f: f.high)
    bottom = min(planted, key=lambda f: f.low)
    if bottom.low <= top.high or top.high <= 0.0:
        raise NoK(
            f"the calibration does not separate aligned from planted faults: aligned reach {top.high:.3g} "
            f"({top.rung} {top.boundary}), the mildest control {bottom.low:.3g} ({bottom.rung} {bottom.boundary})"
        )
    value = round_significant(math.sqrt(top.high * bottom.low))
    return DerivedK(value, top.high, f"{top.rung} {top.boundary}", bottom.low, f"{bottom.rung} {bottom.boundary}")
