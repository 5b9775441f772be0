"""Statistics for per-step metric series: summaries, block-bootstrap intervals, the A/A check.

Steps of one run are autocorrelated (the policy, and so the mismatch, changes slowly), so an
i.i.d. bootstrap or a plain t-interval would be too narrow. The standard error comes from the
circular block bootstrap (Politis & Romano 1992), the block length from the AR(1) plug-in of
Politis & White's (2004) optimal length for the mean, and the interval is estimate +/- t * SE
with (number of blocks - 1) degrees of freedom, as in the batch-means method: measured, this
covers markedly better than percentile limits on 30-120 step series (docs/statistics.md has
the table). Everything is seeded: the same input gives the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

__all__ = [
    "SeriesSummary",
    "DiffCI",
    "AACheck",
    "summarize",
    "default_block_length",
    "block_bootstrap_mean_ci",
    "block_bootstrap_diff_ci",
    "block_bootstrap_paired_diff_ci",
    "aa_check",
    "split_halves",
]

# Lag-1 autocorrelation is clipped here before the plug-in: above 0.9 the AR(1) formula asks
# for blocks longer than a 30-step run can supply, and the estimate itself is unreliable.
MAX_AUTOCORRELATION = 0.9
AA_CRITERIA = ("equivalence", "point")


@dataclass(frozen=True)
class SeriesSummary:
    """Summary of a series after warm-up; NaN/inf steps are left out and listed in nan_steps."""

    n: int
    mean: float
    median: float
    std: float
    cv: float
    slope: float
    slope_ci_low: float
    slope_ci_high: float
    first_step_used: int
    nan_steps: list[int]


@dataclass(frozen=True)
class DiffCI:
    """mean(b) - mean(a) with its block-bootstrap interval."""

    diff: float
    low: float
    high: float
    excludes_zero: bool
    confidence: float
    block_len_a: int
    block_len_b: int
    # The bootstrap standard error and the t degrees of freedom the interval was built from, so the
    # same difference can be re-judged at another level (Holm, harness.judge.outcome).
    se: float = float("nan")
    df: float = float("nan")

    @classmethod
    def around(cls, diff: float, se: float, df: float, confidence: float, block_len_a: int = 1, block_len_b: int = 1) -> DiffCI:
        """The interval diff +/- t(df) x se at `confidence`: the one shape every difference here has."""
        if not 0 < confidence < 1:
            raise ValueError(f"confidence={confidence}: expected a probability in (0, 1)")
        half_width = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * se
        low, high = diff - half_width, diff + half_width
        return cls(diff, low, high, bool(low > 0 or high < 0), confidence, block_len_a, block_len_b, se, df)


@dataclass(frozen=True)
class AACheck:
    """Relative difference of two runs that should agree (two seeds, or two halves of one run)."""

    mean_a: float
    mean_b: float
    rel_diff: float
    rel_ci_low: float
    rel_ci_high: float
    rel_tol: float
    criterion: str
    stable: bool
    reason: str
    rel_se: float = float("nan")  # bootstrap standard error of rel_diff (harness.judge.margin)


def summarize(
    values: Sequence[float],
    warmup: int,
    *,
    steps: Sequence[int] | None = None,
    confidence: float = 0.95,
) -> SeriesSummary:
    """Mean, median, std (ddof=1), CV and Theil-Sen slope per step, after `warmup` entries.

    `steps` gives each entry's step number (default: its position). Non-finite entries after the
    warm-up are excluded and reported in `nan_steps`; a series with no usable entry gives n=0
    and NaN figures rather than an exception, so the caller can say "too few steps".
    """
    if warmup < 0:
        raise ValueError(f"summarize: warmup={warmup}, expected a number of steps >= 0")
    array = np.asarray(values, dtype=float)
    step_numbers = np.arange(len(array)) if steps is None else np.asarray(steps, dtype=int)
    if step_numbers.shape != array.shape:
        raise ValueError(f"summarize: {len(array)} values but {len(step_numbers)} step numbers")
    array, step_numbers = array[warmup:], step_numbers[warmup:]
    finite = np.isfinite(array)
    nan_steps = [int(s) for s in step_numbers[~finite]]
    used, used_steps = array[finite], step_numbers[finite]
    first_step = int(step_numbers[0]) if len(step_numbers) else warmup
    n = len(used)
    nan = float("nan")
    mean = float(np.mean(used)) if n else nan
    std = float(np.std(used, ddof=1)) if n > 1 else nan
    slope = low = high = nan
    if n > 2 and np.ptp(used_steps) > 0:
        fit = scipy_stats.theilslopes(used, used_steps, alpha=confidence)
        slope, low, high = float(fit.slope), float(fit.low_slope), float(fit.high_slope)
    return SeriesSummary(
        n=n,
        mean=mean,
        median=float(np.median(used)) if n else nan,
        std=std,
        cv=std / abs(mean) if n > 1 and mean != 0 else nan,
        slope=slope,
        slope_ci_low=low,
        slope_ci_high=high,
        first_step_used=first_step,
        nan_steps=nan_steps,
    )


def _finite_series(values: Sequence[float], name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        raise ValueError(
            f"{name}[{bad[0]}] is {array[bad[0]]}: bootstrap needs finite values; summarize() "
            "lists the non-finite steps so they can be reported and left out"
        )
    if len(array) < 2:
        raise ValueError(f"{name} has {len(array)} value(s); an interval needs at least 2")
    return array


def default_block_length(values: Sequence[float]) -> int:
    """Circular-block length for the mean: b = (6 rho^2 / (1 - rho^2)^2)^(1/3) * n^(1/3).

    rho is the lag-1 autocorrelation, clipped to [0, 0.9]; b is rounded and kept in [1, n // 2].
    For an AR(1) series this is Politis & White's optimal block length; for independent steps
    (rho ~ 0) it gives 1, the ordinary bootstrap.
    """
    array = np.asarray(values, dtype=float)
    n = len(array)
    if n < 4:
        return 1
    centred = array - array.mean()
    denominator = float(np.dot(centred, centred))
    rho = float(np.dot(centred[:-1], centred[1:]) / denominator) if denominator > 0 else 0.0
    rho = min(max(rho, 0.0), MAX_AUTOCORRELATION)
    length = (6 * rho**2 / (1 - rho**2) ** 2) ** (1 / 3) * n ** (1 / 3)
    return int(min(max(round(length), 1), max(n // 2, 1)))


def _circular_block_means(array: np.ndarray, block_len: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `n_resamples` circular-block resamples: random starts, blocks wrap around the end."""
    n = len(array)
    if not 1 <= block_len <= n:
        raise ValueError(f"block_len={block_len}: expected 1 <= block_len <= {n} (the series length)")
    n_blocks = -(-n // block_len)
    starts = rng.integers(0, n, size=(n_resamples, n_blocks))
    index = (starts[:, :, None] + np.arange(block_len)) % n
    return array[index.reshape(n_resamples, -1)[:, :n]].mean(axis=1)


def _degrees_of_freedom(n: int, block_len: int) -> float:
    """Roughly independent blocks in the series, less one (at least 1)."""
    return max(n / block_len - 1.0, 1.0)


def _t_interval(estimate: float, resampled: np.ndarray, df: float, confidence: float) -> tuple[float, float]:
    """estimate +/- t(df) * (standard deviation of the bootstrap replicates)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: expected a probability in (0, 1)")
    half_width = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * float(np.std(resampled, ddof=1))
    return estimate - half_width, estimate + half_width


def block_bootstrap_mean_ci(
    values: Sequence[float],
    block_len: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval for the mean of an autocorrelated series: mean +/- t * circular-block-bootstrap SE."""
    array = _finite_series(values, "values")
    means, _, df = _series_bootstrap(array, block_len, n_resamples, seed)
    return _t_interval(float(array.mean()), means, df, confidence)


def _series_bootstrap(array: np.ndarray, block_len: int | None, n_resamples: int, seed: int) -> tuple[np.ndarray, int, float]:
    """One series' circular-block-bootstrap means, the block length used and the degrees of freedom."""
    length = default_block_length(array) if block_len is None else block_len
    means = _circular_block_means(array, length, n_resamples, np.random.default_rng(seed))
    return means, length, _degrees_of_freedom(len(array), length)


def _paired_resample_means(
    a: np.ndarray, b: np.ndarray, block_len: int | None, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray, int, int]:
    # Two runs are independent processes: each is resampled on its own, with its own block length.
    len_a = default_block_length(a) if block_len is None else block_len
    len_b = default_block_length(b) if block_len is None else block_len
    rng = np.random.default_rng(seed)
    return (
        _circular_block_means(a, len_a, n_resamples, rng),
        _circular_block_means(b, len_b, n_resamples, rng),
        len_a,
        len_b,
    )


def _pair_degrees_of_freedom(n_a: int, len_a: int, n_b: int, len_b: int) -> float:
    # The smaller of the two series' block counts: conservative, and exact when they are equal.
    return min(_degrees_of_freedom(n_a, len_a), _degrees_of_freedom(n_b, len_b))


def block_bootstrap_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    block_len: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> DiffCI:
    """Interval for mean(b) - mean(a) of two independent runs (e.g. a rung against its parent)."""
    array_a, array_b = _finite_series(a, "a"), _finite_series(b, "b")
    means_a, means_b, len_a, len_b = _paired_resample_means(array_a, array_b, block_len, n_resamples, seed)
    diff = float(array_b.mean() - array_a.mean())
    df = _pair_degrees_of_freedom(len(array_a), len_a, len(array_b), len_b)
    return DiffCI.around(diff, float(np.std(means_b - means_a, ddof=1)), df, confidence, len_a, len_b)


def block_bootstrap_paired_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    block_len: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> DiffCI:
    """Interval for mean(b - a) of two runs paired step by step (the A/B: same seeds, same prompts
    at each step): the per-step differences are one autocorrelated series, resampled in circular
    blocks. What the two runs share at a step (its prompts) cancels in the difference, so the
    interval is narrower than block_bootstrap_diff_ci's wherever the runs' steps correlate, and
    about the same where they do not."""
    array_a, array_b = _finite_series(a, "a"), _finite_series(b, "b")
    if len(array_a) != len(array_b):
        raise ValueError(f"paired series need one value per step on both sides: {len(array_a)} vs {len(array_b)}")
    differences = array_b - array_a
    means, length, df = _series_bootstrap(differences, block_len, n_resamples, seed)
    return DiffCI.around(float(differences.mean()), float(np.std(means, ddof=1)), df, confidence, length, length)


def split_halves(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """First and second half of a series, equal length; the middle entry of an odd series is dropped."""
    array = np.asarray(values, dtype=float).reshape(-1)
    half = len(array) // 2
    return array[:half], array[len(array) - half :]


def _relative(mean_a: np.ndarray | float, mean_b: np.ndarray | float) -> np.ndarray:
    # Symmetric: relative to the average magnitude of the two means (swapping a and b flips the sign).
    scale = (np.abs(mean_a) + np.abs(mean_b)) / 2
    return np.where(scale > 0, (np.asarray(mean_b) - mean_a) / np.where(scale > 0, scale, 1), 0.0)


def _aa_refusal(a: np.ndarray, b: np.ndarray) -> str | None:
    for name, array in (("a", a), ("b", b)):
        bad = np.flatnonzero(~np.isfinite(array))
        if len(bad):
            return f"{name}[{bad[0]}] is {array[bad[0]]}: the A/A check needs finite values"
        if len(array) < 4:
            return f"{name} has {len(array)} value(s); the A/A check needs at least 4 per side"
    return None


def aa_check(
    a: Sequence[float],
    b: Sequence[float],
    rel_tol: float,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    block_len: int | None = None,
    criterion: str = "equivalence",
) -> AACheck:
    """Is the metric stable enough to compare? Two runs that should agree, checked against rel_tol.

    rel_diff = (mean(b) - mean(a)) / ((|mean(a)| + |mean(b)|) / 2), with a block-bootstrap
    interval. criterion "equivalence" (default): stable when the whole interval lies inside
    [-rel_tol, rel_tol], i.e. the data bound the A/A difference, not just fail to see one.
    criterion "point": stable when |rel_diff| <= rel_tol. Never raises on bad data: an unusable
    series is reported as not stable, with the reason.
    """
    if criterion not in AA_CRITERIA:
        raise ValueError(f"criterion={criterion!r}: expected one of {AA_CRITERIA}")
    if not rel_tol > 0:
        raise ValueError(f"rel_tol={rel_tol}: expected a positive fraction (0.2 = 20%)")
    array_a = np.asarray(a, dtype=float).reshape(-1)
    array_b = np.asarray(b, dtype=float).reshape(-1)
    nan = float("nan")
    refusal = _aa_refusal(array_a, array_b)
    if refusal is not None:
        return AACheck(nan, nan, nan, nan, nan, rel_tol, criterion, False, refusal)
    mean_a, mean_b = float(array_a.mean()), float(array_b.mean())
    means_a, means_b, len_a, len_b = _paired_resample_means(array_a, array_b, block_len, n_resamples, seed)
    rel = float(_relative(mean_a, mean_b))
    df = _pair_degrees_of_freedom(len(array_a), len_a, len(array_b), len_b)
    resampled = _relative(means_a, means_b)
    low, high = _t_interval(rel, resampled, df, confidence)
    if criterion == "equivalence":
        stable = -rel_tol <= low and high <= rel_tol
    else:
        stable = abs(rel) <= rel_tol
    verdict = "stable" if stable else "not stable"
    rule = f"{confidence:.0%} interval inside +/-{rel_tol:.1%}" if criterion == "equivalence" else f"|difference| <= {rel_tol:.1%}"
    reason = (
        f"A/A relative difference {rel:+.1%} (means {mean_a:.6g} vs {mean_b:.6g}, "
        f"{confidence:.0%} CI {low:+.1%}..{high:+.1%}); rule: {rule}: {verdict}"
    )
    return AACheck(mean_a, mean_b, rel, low, high, rel_tol, criterion, bool(stable), reason, float(np.std(resampled, ddof=1)))
