"""harness.judge.variance: the judge's standard error against the true spread, on sides shaped like the P1 runs.

A side as the main job judges it: 5 seeds x 28 judged steps, per-step CV 0.46, AR(1) with lag-1
correlation 0.3 (the recorded P1 runs measure -0.35 to +0.31), and a seed effect on each run's mean:
none, as large as a run's own noise, and the largest between-seed spread the design measured on a
non-control rung (5.75% of the mean, fp8-rollout). For each, the judge's SE must average within 10% of
the empirical standard deviation of the side's estimate over the simulated trials, and its t interval
must cover the true mean at about the nominal 95%. The estimator the judge used before (the steps'
block-bootstrap noise unless an F test found a seed effect) gives 0.88x with a seed effect the size of
a run's own noise and fails the first test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.judge import variance

SEEDS, STEPS, RHO, STEP_CV = 5, 28, 0.3, 0.46
TRIALS = 1500


def ar1_runs(rng: np.random.Generator, runs: int, steps: int, rho: float, sd: float) -> np.ndarray:
    """`runs` stationary AR(1) series (rows) of `steps` with marginal standard deviation `sd`, mean 0."""
    noise = rng.normal(0.0, sd * math.sqrt(1 - rho**2), (runs, steps))
    x = np.empty((runs, steps))
    x[:, 0] = rng.normal(0.0, sd, runs)
    for t in range(1, steps):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


def run_noise_sd(rng: np.random.Generator) -> float:
    """The standard deviation of one run's mean from its steps alone (the seed effect 'as large as a run's noise')."""
    return float(ar1_runs(rng, 20000, STEPS, RHO, STEP_CV).mean(axis=1).std())


def simulate(standard_error, seed_sd: float, rng: np.random.Generator, seeds: int = SEEDS) -> tuple[float, float]:
    """(mean judged SE / empirical SD of the estimate, coverage of the t interval at 95%) over TRIALS sides."""
    estimates, ses, covered = [], [], 0
    for _ in range(TRIALS):
        runs = 1.0 + rng.normal(0.0, seed_sd, (seeds, 1)) + ar1_runs(rng, seeds, STEPS, RHO, STEP_CV)
        estimate, se, df = standard_error(list(runs))
        estimates.append(estimate)
        ses.append(se)
        covered += abs(estimate - 1.0) <= float(scipy_stats.t.ppf(0.975, df)) * se
    return float(np.mean(ses) / np.std(estimates)), covered / TRIALS


def judge_se(replicates):
    side = variance.side_estimate(replicates)
    return side.mean, side.se, side.df


@pytest.mark.parametrize("seed_effect", ["none", "a run's own noise", "measured (5.75% of the mean)"])
def test_the_judges_side_se_is_within_ten_percent_of_the_true_spread(seed_effect):
    rng = np.random.default_rng(45)
    seed_sd = {"none": 0.0, "a run's own noise": run_noise_sd(rng), "measured (5.75% of the mean)": 0.0575}[seed_effect]
    ratio, coverage = simulate(judge_se, seed_sd, rng)
    assert 0.9 <= ratio <= 1.1, f"judged SE {ratio:.3f}x the empirical SD with seed effect {seed_effect}"
    assert 0.93 <= coverage <= 0.97, f"coverage {coverage:.3f} at 95% with seed effect {seed_effect}"


def test_one_seed_with_the_designs_seed_variance_is_within_ten_percent():
    # A cluster side (one run) carries the seed variance the design measured on the spec's A/A runs.
    rng = np.random.default_rng(46)
    seed_sd = run_noise_sd(rng)
    prior = variance.SeedPrior(relative_sd=seed_sd, df=4)

    def one_seed(replicates):
        side = variance.side_estimate(replicates, prior)
        return side.mean, side.se, side.df

    ratio, coverage = simulate(one_seed, seed_sd, rng, seeds=1)
    assert 0.9 <= ratio <= 1.1, ratio
    assert coverage >= 0.93, coverage


def test_within_run_noise_is_within_ten_percent_under_autocorrelation():
    # Overlapping batch means of 7 steps on 28: the variance of one run's mean, rho 0 and 0.3.
    rng = np.random.default_rng(47)
    for rho in (0.0, 0.3):
        runs = ar1_runs(rng, 4000, STEPS, rho, STEP_CV)
        judged = np.array([variance.run_noise(r).variance for r in runs])
        true = float(runs.mean(axis=1).var())
        assert 0.9 <= math.sqrt(judged.mean() / true) <= 1.1, (rho, math.sqrt(judged.mean() / true))


def test_one_run_without_a_prior_says_its_seed_part_is_not_known():
    side = variance.side_estimate([[1.0, 1.2, 0.9, 1.1, 1.0, 0.8, 1.3, 1.0]])
    assert side.seed_part == variance.NOT_KNOWN and math.isnan(side.seed)
    assert side.variance == pytest.approx(variance.run_noise([1.0, 1.2, 0.9, 1.1, 1.0, 0.8, 1.3, 1.0]).variance)


def test_over_seeds_the_variance_is_the_run_means_spread_and_its_parts_add_up():
    rng = np.random.default_rng(48)
    runs = [1.0 + offset + rng.normal(0, 0.3, 28) for offset in (-0.2, 0.0, 0.1, 0.3)]
    side = variance.side_estimate(runs)
    means = [r.mean() for r in runs]
    assert side.variance == pytest.approx(np.var(means, ddof=1) / 4)
    assert side.df == 3 and side.seed_part == variance.SEEDS
    assert (side.seed + side.within) / 4 == pytest.approx(side.variance)


def test_a_non_finite_step_is_refused_naming_the_run():
    with pytest.raises(ValueError, match=r"b\[1\]\[1\] is nan"):
        variance.replicated_diff_ci([[1.0, 2.0, 3.0]] * 2, [[1.0, 2.0, 3.0], [1.0, float("nan"), 2.0]])


def test_paired_pairs_are_one_side_of_differences():
    rng = np.random.default_rng(49)
    pairs = []
    for _ in range(4):
        shared = rng.normal(0, 0.1, 28)
        pairs.append((0.7 + shared + rng.normal(0, 0.01, 28), 0.68 + shared + rng.normal(0, 0.01, 28)))
    ci = variance.paired_diff_ci(pairs)
    per_pair = [np.mean(b - a) for a, b in pairs]
    assert ci.diff == pytest.approx(np.mean(per_pair))
    assert ci.se == pytest.approx(np.std(per_pair, ddof=1) / 2)
    with pytest.raises(ValueError, match="pair 0: .* 3 vs 4"):
        variance.paired_diff_ci([([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])])
