"""harness.judge.stats against series built to pass and built to fail.

The coverage tests simulate AR(1) noise around a known mean (the shape of a per-step metric:
autocorrelated, stationary) and count how often the interval holds the true mean. Their bounds
are set below the measured coverage (docs/statistics.md has the table) with a margin for
Monte-Carlo noise, and above what the i.i.d. bootstrap achieves, so they fail if the block
structure stops mattering.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.judge import stats


def ar1(n: int, rho: float, mean: float, sd: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1): x_t = rho * x_{t-1} + e_t, e ~ N(0, sd^2), started from its stationary law."""
    noise = rng.normal(0.0, sd, n)
    x = np.empty(n)
    x[0] = noise[0] / math.sqrt(1 - rho**2)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + noise[t]
    return mean + x


def coverage(n: int, rho: float, block_len: int | None, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for rep in range(reps):
        low, high = stats.block_bootstrap_mean_ci(ar1(n, rho, 1.0, 0.1, rng), block_len=block_len, n_resamples=1000, seed=rep)
        hits += low <= 1.0 <= high
    return hits / reps


# --- summarize ---------------------------------------------------------------------------


def test_summarize_drops_warmup_and_computes_the_figures():
    summary = stats.summarize([10.0, 10.0, 1.0, 2.0, 3.0, 4.0, 5.0], warmup=2)
    assert summary.n == 5 and summary.first_step_used == 2 and summary.nan_steps == []
    assert summary.mean == pytest.approx(3.0) and summary.median == pytest.approx(3.0)
    assert summary.std == pytest.approx(math.sqrt(2.5))
    assert summary.cv == pytest.approx(math.sqrt(2.5) / 3.0)
    assert summary.slope == pytest.approx(1.0)
    assert summary.slope_ci_low <= 1.0 <= summary.slope_ci_high


def test_summarize_lists_non_finite_steps_by_step_number_and_leaves_them_out():
    values = [9.0, 1.0, float("nan"), 2.0, None, 3.0, float("inf")]
    summary = stats.summarize(values, warmup=1, steps=range(100, 107))
    assert summary.nan_steps == [102, 104, 106]
    assert summary.n == 3 and summary.mean == pytest.approx(2.0)
    assert summary.first_step_used == 101


def test_summarize_with_nothing_after_warmup_reports_zero_steps_not_an_exception():
    summary = stats.summarize([1.0, 2.0], warmup=5)
    assert summary.n == 0 and math.isnan(summary.mean) and math.isnan(summary.slope)


def test_summarize_rejects_a_negative_warmup():
    with pytest.raises(ValueError, match="warmup=-1"):
        stats.summarize([1.0, 2.0], warmup=-1)


def test_trend_slope_interval_excludes_zero_for_a_trending_series_and_includes_it_for_a_flat_one():
    rng = np.random.default_rng(3)
    steps = np.arange(40)
    trending = stats.summarize(0.01 + 0.0005 * steps + rng.normal(0, 0.001, 40), warmup=0)
    flat = stats.summarize(0.01 + rng.normal(0, 0.001, 40), warmup=0)
    assert trending.slope_ci_low > 0, trending
    assert trending.slope == pytest.approx(0.0005, rel=0.3)
    assert flat.slope_ci_low <= 0 <= flat.slope_ci_high, flat


# --- block length and the bootstrap --------------------------------------------------------


def test_block_length_grows_with_autocorrelation_and_is_one_for_independent_steps():
    rng = np.random.default_rng(0)
    independent = stats.default_block_length(rng.normal(size=200))
    correlated = stats.default_block_length(ar1(200, 0.8, 0.0, 1.0, rng))
    assert independent == 1
    assert correlated >= 8
    assert stats.default_block_length([1.0, 2.0, 3.0]) == 1


def test_one_block_as_long_as_the_series_only_rotates_it_so_the_interval_is_the_mean():
    values = np.array([0.3, 0.1, 0.7, 0.2, 0.9])
    low, high = stats.block_bootstrap_mean_ci(values, block_len=len(values))
    assert low == pytest.approx(values.mean()) and high == pytest.approx(values.mean())


def test_block_length_one_is_the_ordinary_bootstrap():
    values = np.random.default_rng(1).normal(size=50)
    low, high = stats.block_bootstrap_mean_ci(values, block_len=1, n_resamples=4000)
    standard_error = values.std(ddof=0) / math.sqrt(len(values))
    assert (high - low) / (2 * 1.96 * standard_error) == pytest.approx(1.0, abs=0.1)


def test_intervals_are_deterministic_for_a_seed():
    values = np.random.default_rng(2).normal(size=30)
    assert stats.block_bootstrap_mean_ci(values, seed=5) == stats.block_bootstrap_mean_ci(values, seed=5)
    assert stats.block_bootstrap_mean_ci(values, seed=5) != stats.block_bootstrap_mean_ci(values, seed=6)


def test_block_bootstrap_covers_the_mean_of_autocorrelated_steps_where_iid_does_not():
    block = coverage(n=120, rho=0.6, block_len=None, reps=200, seed=11)
    iid = coverage(n=120, rho=0.6, block_len=1, reps=200, seed=11)
    assert block >= 0.86, f"block-bootstrap coverage {block:.2f} at n=120, rho=0.6"
    assert iid <= 0.78, f"i.i.d. coverage {iid:.2f}: the series is not autocorrelated enough to test"
    assert block - iid >= 0.15, f"block {block:.2f} vs iid {iid:.2f}"


def test_block_bootstrap_coverage_on_a_30_step_run_is_known_and_held():
    # A 30-step run is what the acceptance criteria judge; measured 0.84-0.87 here (docs/statistics.md).
    assert coverage(n=30, rho=0.6, block_len=None, reps=200, seed=13) >= 0.80


def test_block_bootstrap_keeps_nominal_coverage_on_independent_steps():
    assert coverage(n=60, rho=0.0, block_len=None, reps=200, seed=12) >= 0.88


def test_bootstrap_refuses_non_finite_values_and_names_the_index():
    with pytest.raises(ValueError, match=r"values\[2\] is nan"):
        stats.block_bootstrap_mean_ci([1.0, 2.0, float("nan"), 3.0])
    with pytest.raises(ValueError, match="at least 2"):
        stats.block_bootstrap_mean_ci([1.0])


# --- difference of two runs ------------------------------------------------------------------


def test_diff_interval_excludes_zero_for_a_shifted_copy_and_holds_the_shift():
    rng = np.random.default_rng(4)
    parent = ar1(50, 0.5, 0.020, 0.002, rng)
    rung = ar1(50, 0.5, 0.020, 0.002, rng) + 0.004
    result = stats.block_bootstrap_diff_ci(parent, rung)
    assert result.excludes_zero and result.low > 0
    assert result.low <= 0.004 <= result.high, result
    assert result.diff == pytest.approx(rung.mean() - parent.mean())


def test_diff_interval_rarely_excludes_zero_between_runs_with_the_same_mean():
    rng = np.random.default_rng(5)
    false_alarms = sum(
        stats.block_bootstrap_diff_ci(ar1(60, 0.5, 0.02, 0.002, rng), ar1(60, 0.5, 0.02, 0.002, rng), n_resamples=1000, seed=rep).excludes_zero
        for rep in range(150)
    )
    assert false_alarms / 150 <= 0.2, f"{false_alarms}/150 same-mean pairs called different"


# --- A/A ---------------------------------------------------------------------------------------


def test_split_halves_gives_equal_halves_and_drops_the_middle_of_an_odd_series():
    first, second = stats.split_halves([1, 2, 3, 4, 5])
    assert first.tolist() == [1, 2] and second.tolist() == [4, 5]
    first, second = stats.split_halves([1, 2, 3, 4])
    assert first.tolist() == [1, 2] and second.tolist() == [3, 4]


def test_aa_two_seeds_of_the_same_process_are_stable():
    rng = np.random.default_rng(6)
    check = stats.aa_check(ar1(80, 0.5, 0.02, 0.002, rng), ar1(80, 0.5, 0.02, 0.002, rng), rel_tol=0.2)
    assert check.stable, check.reason
    assert -0.2 <= check.rel_ci_low <= check.rel_diff <= check.rel_ci_high <= 0.2


def test_aa_a_run_shifted_by_forty_percent_is_not_stable_and_the_reason_says_by_how_much():
    rng = np.random.default_rng(7)
    check = stats.aa_check(ar1(80, 0.5, 0.02, 0.002, rng), ar1(80, 0.5, 0.028, 0.002, rng), rel_tol=0.2)
    assert not check.stable
    assert check.rel_diff == pytest.approx(0.33, abs=0.07)
    assert "not stable" in check.reason and "+/-20.0%" in check.reason


def test_aa_split_halves_of_a_trending_run_is_not_stable():
    rng = np.random.default_rng(8)
    trending = 0.01 + 0.0004 * np.arange(60) + rng.normal(0, 0.0005, 60)
    check = stats.aa_check(*stats.split_halves(trending), rel_tol=0.2)
    assert not check.stable, check.reason


def test_aa_equivalence_is_stricter_than_the_point_rule_for_a_noisy_metric():
    # 12 short, strongly autocorrelated steps: the two means happen to agree within 20%, but the
    # data cannot bound the difference, so only the point rule calls it stable.
    rng = np.random.default_rng(13)
    a, b = ar1(12, 0.7, 0.02, 0.006, rng), ar1(12, 0.7, 0.02, 0.006, rng)
    point = stats.aa_check(a, b, rel_tol=0.2, criterion="point")
    equivalence = stats.aa_check(a, b, rel_tol=0.2, criterion="equivalence")
    assert point.rel_diff == equivalence.rel_diff and abs(point.rel_diff) <= 0.2
    assert point.stable, point.reason
    assert not equivalence.stable, equivalence.reason
    assert equivalence.rel_ci_low < -0.2, equivalence.reason


def test_aa_reports_unusable_input_as_not_stable_with_the_reason():
    check = stats.aa_check([0.1, 0.2, float("nan"), 0.1, 0.2], [0.1, 0.2, 0.1, 0.2], rel_tol=0.2)
    assert not check.stable and "a[2] is nan" in check.reason
    check = stats.aa_check([0.1, 0.2], [0.1, 0.2, 0.1, 0.2], rel_tol=0.2)
    assert not check.stable and "at least 4" in check.reason


def test_aa_relative_difference_is_antisymmetric():
    rng = np.random.default_rng(10)
    a, b = ar1(40, 0.3, 0.02, 0.002, rng), ar1(40, 0.3, 0.025, 0.002, rng)
    assert stats.aa_check(a, b, 0.2).rel_diff == pytest.approx(-stats.aa_check(b, a, 0.2).rel_diff)


def test_paired_difference_cancels_what_the_runs_share_at_each_step():
    # Two runs of one workload: a shared per-step component (the step's prompts) plus each run's own
    # noise, the candidate 0.02 lower. Paired, the shared part cancels; unpaired, it does not.
    rng = np.random.default_rng(11)
    shared = ar1(28, 0.3, 0.0, 0.08, rng)
    a = 0.7 + shared + rng.normal(0.0, 0.03, 28)
    b = 0.68 + shared + rng.normal(0.0, 0.03, 28)
    paired, independent = stats.block_bootstrap_paired_diff_ci(a, b), stats.block_bootstrap_diff_ci(a, b)
    assert paired.diff == pytest.approx(independent.diff)
    assert paired.high - paired.low < 0.6 * (independent.high - independent.low), (paired, independent)
    assert paired.low < -0.02 < paired.high


def test_paired_coverage_holds_without_a_shared_component():
    # Nothing shared and no true difference: the paired interval must still hold 0 about as often as
    # the block bootstrap does at n=40, rho=0.5 (measured 0.86 over these 300 draws at 95%; the same
    # with blocks of 1, an i.i.d. resample, 0.71), so the floor fails if the blocks stop mattering.
    rng = np.random.default_rng(5)
    held = 0
    for rep in range(300):
        ci = stats.block_bootstrap_paired_diff_ci(ar1(40, 0.5, 0.02, 0.002, rng), ar1(40, 0.5, 0.02, 0.002, rng), n_resamples=400, seed=rep)
        held += ci.low <= 0.0 <= ci.high
    assert held / 300 >= 0.80, held / 300


def test_paired_series_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one value per step on both sides: 3 vs 4"):
        stats.block_bootstrap_paired_diff_ci([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
