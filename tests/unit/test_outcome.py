"""Three outcomes against the minimum effect of interest, Holm's step-down, and what the ladder
judge makes of them (harness.judge.outcome, harness.judge.ladder, harness.judge.completeness)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.evidence import family_levels, judge_rung
from harness.judge import outcome
from harness.judge.evidence import BudgetNotMeasured
from harness.judge.expectations import expectation_findings
from harness.judge.ladder import family_members
from harness.judge.stats import DiffCI
from harness.spec import load_knobs
from harness.spec.schema import Expectation

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def diff_ci(diff, se, df=20.0):
    return DiffCI(diff, diff - 2 * se, diff + 2 * se, False, 0.95, 1, 1, se=se, df=df)


@pytest.mark.parametrize(
    ("delta", "se", "expected"),
    [
        (0.010, 0.001, "up"),  # interval [~0.008, ~0.012] above E = 0.002
        (-0.010, 0.001, "down"),
        (0.0002, 0.0005, "flat"),  # [-0.0008, 0.0012] inside +/-0.002
        (0.0025, 0.001, "inconclusive"),  # excludes zero but not E: an effect is not shown
        (0.0, 0.003, "inconclusive"),  # centred on zero but too wide to bound the effect: not flat
    ],
)
def test_three_outcomes_against_the_effect_of_interest(delta, se, expected):
    result = outcome.judge_outcome(diff_ci(delta, se), effect=0.002, confidence=0.95)
    assert result.direction == expected, result.describe()


def test_an_inconclusive_outcome_says_the_smallest_effect_it_could_have_detected():
    result = outcome.judge_outcome(diff_ci(0.0, 0.003), effect=0.002, confidence=0.95)
    half = scipy_stats.t.ppf(0.975, 20.0) * 0.003
    assert result.half_width == pytest.approx(half) and result.detectable == pytest.approx(0.002 + half)
    assert "smallest effect this run could have detected" in result.describe()


def test_the_p_value_agrees_with_the_interval_at_every_level():
    for delta, se in [(0.004, 0.001), (0.0005, 0.0006), (0.0021, 0.002), (-0.009, 0.003)]:
        ci = diff_ci(delta, se)
        p = outcome.decision_p_value(ci, 0.002)
        for alpha in (0.001, 0.01, 0.05, 0.2):
            decisive = outcome.judge_outcome(ci, 0.002, 1 - alpha).direction != "inconclusive"
            assert decisive == (p <= alpha), (delta, se, alpha, p)


def test_effect_of_interest_is_the_larger_of_the_absolute_and_relative_floors():
    assert outcome.effect_of_interest(1.6e-7, 1e-4, 0.25) == 1e-4
    assert outcome.effect_of_interest(1.44e-3, 1e-4, 0.25) == pytest.approx(3.6e-4)


def test_holm_step_down_levels_and_stop():
    levels = outcome.holm_levels({"a": 0.001, "b": 0.02, "c": 0.011, "d": 0.3}, alpha=0.05)
    assert [levels[n].rank for n in "acbd"] == [1, 2, 3, 4]
    assert [levels[n].alpha for n in "acbd"] == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])
    assert all(levels[n].family_size == 4 for n in "abcd")
    # a (0.001 <= 0.0125) and c (0.011 <= 0.0167) and b (0.02 <= 0.025) pass; d is tested, fails
    assert [levels[n].reached for n in "acbd"] == [True, True, True, True]
    failing_first = outcome.holm_levels({"a": 0.04, "b": 0.045}, alpha=0.05)
    # a is tested at 0.025 and fails: b (0.045 <= 0.05 on its own) is never reached
    assert failing_first["a"].reached and not failing_first["b"].reached


def test_holm_keeps_the_family_wise_error_where_single_intervals_do_not():
    # 7 true-null decisions with independent uniform p-values: any false call is a family error.
    rng = np.random.default_rng(3)
    single = holm = 0
    trials = 4000
    for _ in range(trials):
        p = {str(i): float(v) for i, v in enumerate(rng.uniform(size=7))}
        single += any(v <= 0.05 for v in p.values())
        levels = outcome.holm_levels(p, 0.05)
        holm += any(levels[n].reached and p[n] <= levels[n].alpha for n in p)
    assert single / trials > 0.25  # 1 - 0.95^7 = 0.30
    assert holm / trials <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / trials)


def test_a_rung_expects_one_outcome_or_names_the_design_that_says_why_not():
    import pydantic

    one = Expectation.model_validate({"class": "semantic", "direction": "up", "design": "ladder/top-p"})
    assert one.direction_expected and one.class_expected
    # Sets of accepted outcomes and "any direction" are gone: an expectation is one outcome, pre-registered.
    for bad in ({"class": "semantic", "direction": ["up", "inconclusive"]}, {"class": "framework", "direction": "any"}):
        with pytest.raises(pydantic.ValidationError):
            Expectation.model_validate(bad)
    # "not-expected" is gone: an answer is expected, or it leaves for a named report with its reason.
    with pytest.raises(pydantic.ValidationError):
        Expectation.model_validate({"class": "framework", "direction": "not-expected", "design": "ladder/stale-weights"})
    away = {"report": "controls", "reason": "a planted fault's size is not a question of the experiment"}
    reported = Expectation.model_validate({"class": "framework", "reported": {"direction": away}, "design": "ladder/stale-weights"})
    assert not reported.direction_expected and reported.class_expected and reported.reported["direction"].report == "controls"
    with pytest.raises(pydantic.ValidationError, match="expected or reported, not both"):
        Expectation.model_validate({"class": "framework", "direction": "up", "reported": {"direction": away}})


def test_a_rung_expected_down_cannot_expect_the_class_its_parent_decides():
    """A down rung's class is decided on its parent's evidence (the drift it removes is the parent's):
    true-on-policy's expected-numerical was near-aligned's own boundary table read a second time."""
    import pydantic

    from harness.spec.schema import Rung

    rung = KNOBS.rungs["true-on-policy"].model_dump(by_alias=True)
    rung["expect"] = {"class": "expected-numerical", "direction": "down", "design": "ladder/true-on-policy"}
    with pytest.raises(pydantic.ValidationError, match="decided on its parent's evidence"):
        Rung.model_validate(rung)
    assert KNOBS.rungs["true-on-policy"].expect.reported["class"].report == "derived"


def noisy(mean, scale, rho=0.5, seed=0):
    rng = np.random.default_rng(seed)
    values = [mean]
    for _ in range(60):
        values.append(mean + rho * (values[-1] - mean) + rng.normal(0, scale * mean))
    return lambda n: float(values[n])


def fetcher(runs):
    def fetch(rung, **overrides):
        return runs[(rung, tuple(sorted(overrides.items())))]

    return fetch


def test_a_wide_interval_around_zero_is_inconclusive_not_flat_and_decides_no_class(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.0135, 0.6, seed=1))
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [])
    # Wide enough that it may add drift of interest too (the one-sided "not up" is not shown).
    assert (judgement.observed_direction, judgement.drift_class) == ("inconclusive", "undetermined"), judgement.summary()
    assert "INCONCLUSIVE: smallest detectable effect" in judgement.summary()
    # Undetermined is no class the temperature rung holds; what it holds is framework, semantic and
    # operator drift ruled out by evidence, and here no probe said which framework probes ran, no contract
    # probe was given and no boundary table.
    findings = expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)
    assert len(findings) == 3 and all("expect.rules_out" in f for f in findings), findings
    assert [f.split(" drift")[0].removeprefix("expected ") for f in findings] == ["framework", "semantic", "candidate-operator"]


def _temperature(build_run, parent_series, child_series, contract, boundary, drift_budget=None):
    """The temperature rung judged against near-aligned on built runs, every framework probe passing."""
    parent = build_run("parent", rung="near-aligned", abs_diff=parent_series)
    child = build_run("child", rung="temperature", abs_diff=child_series)
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(
        KNOBS.rungs["temperature"],
        KNOBS,
        fetcher(runs),
        lambda run: [],
        contract_check=contract,
        framework_not_checked=lambda run: [],
        boundary_check=boundary,
        drift_budget=drift_budget,
    )
    return judgement, child


def _undecided_temperature(build_run, contract, boundary=lambda run: ("within", "every boundary within its envelope", None)):
    return _temperature(build_run, noisy(0.013, 0.05), noisy(0.0135, 0.6, seed=1), contract, boundary)


def test_an_undetermined_delta_meets_temperature_when_probes_rule_out_framework_and_semantic(build_run):
    """Under a second CPU setting the delta was too noisy to decide a class, but probes 1-2 pass on every
    run and probe 6 on each of the rung's runs, which is what "temperature handled alike" asks."""
    judgement, child = _undecided_temperature(build_run, lambda run: ("pass", "same contract"))
    assert judgement.drift_class == "undetermined", judgement.summary()
    assert set(judgement.ruled_out) == {"framework", "semantic", "candidate-operator"}
    assert "not semantic: probe 6 passes" in judgement.summary()
    assert not expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)


def test_temperature_fails_on_a_class_its_own_rule_excludes(build_run):
    """The temperature rung's rule: a class the delta decides must be none or expected-numerical. It
    used to pass on any class that ruled out framework and semantic drift; an operator boundary its own
    run breaks now fails it."""
    judgement, child = _undecided_temperature(
        build_run, lambda run: ("pass", "same contract"), boundary=lambda run: ("breaks", "logsumexp beyond k", "logsumexp")
    )
    assert {"framework", "semantic"} <= set(judgement.ruled_out) and "candidate-operator" not in judgement.ruled_out
    findings = expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)
    assert findings == [
        "expected candidate-operator drift ruled out (ladder/temperature.yaml expect.rules_out), but no evidence rules it out "
        "(decided class 'undetermined')"
    ], findings


def _lowering_temperature(build_run, boundary):
    """The confirmatory sweep's +1600 case: T=0.8 lowers the drift past the effect of interest, so the
    class is near-aligned's, decided by its drift budget (not measured here; undecided at five seeds)."""
    budget = BudgetNotMeasured("near-aligned's budget: inconclusive in this test")
    same_contract = lambda run: ("pass", "same contract")  # noqa: E731
    return _temperature(build_run, noisy(0.013, 0.02), noisy(0.004, 0.02, seed=1), same_contract, boundary, lambda rung_id, runs: budget)


def test_a_lowering_rung_rules_operator_drift_out_by_its_own_boundary_table_not_its_parents_budget(build_run):
    """A rung whose delta is down takes its class from its parent (near-aligned's budget, undecided at
    five seeds). Whether the rung's OWN run breaks an operator boundary is its own question, as its
    contract is: its boundary table answers it. The sweep at +1600 failed temperature here ("no
    evidence rules it out (decided class 'undecided')"): the parent's budget was asked instead."""
    within = lambda run: ("within", "every boundary within its envelope", None)  # noqa: E731
    judgement, child = _lowering_temperature(build_run, within)
    assert judgement.outcome.direction == "down" and judgement.drift_class == "undecided", judgement.summary()
    assert judgement.ruled_out["candidate-operator"] == "child's boundary table: every boundary within its envelope"
    assert not expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)
    breaks = lambda run: ("breaks", "logsumexp beyond k", "logsumexp")  # noqa: E731
    judgement, child = _lowering_temperature(build_run, breaks)
    assert "candidate-operator" not in judgement.ruled_out
    assert any("candidate-operator drift ruled out" in f for f in expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS))


def test_probe_6_failing_on_an_undetermined_delta_decides_semantic(build_run):
    judgement, child = _undecided_temperature(build_run, lambda run: ("fail", "the trainer ignores T"))
    assert judgement.drift_class == "semantic" and "semantic" not in judgement.ruled_out
    findings = expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)
    # The class is not expected (knobs/design.yaml: the delta sits at the effect of interest), but
    # semantic drift must be ruled out by evidence, and here the evidence says the opposite.
    assert any("semantic drift ruled out" in f for f in findings), findings


def test_a_contract_probe_that_could_not_run_rules_nothing_out(build_run):
    judgement, child = _undecided_temperature(build_run, lambda run: ("not checked", "no dump"))
    assert "semantic" not in judgement.ruled_out and "not ruled out: probe 6 not checked" in judgement.summary()
    assert expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)


def test_an_unchecked_framework_probe_rules_framework_out_for_no_rung(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.0135, 0.6, seed=1))
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(
        KNOBS.rungs["temperature"],
        KNOBS,
        fetcher(runs),
        lambda run: [],
        contract_check=lambda run: ("pass", "same contract"),
        framework_not_checked=lambda run: ["probe 2 (model state): no dump"],
    )
    assert "framework" not in judgement.ruled_out and judgement.evidence["framework_not_checked"]
    assert any("framework drift ruled out" in f for f in expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS))


def test_the_judgement_records_the_family_and_the_adjusted_level(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.013, 0.05, seed=1))
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    holm = outcome.HolmLevel(rank=3, family_size=7, alpha=0.05 / 5, reached=True, family=("a", "b", "temperature"))
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [], holm)
    decision = judgement.evidence["decision"]
    assert (decision["family_size"], decision["holm_rank"], decision["adjusted_alpha"]) == (7, 3, 0.01)
    assert judgement.outcome.confidence == pytest.approx(0.99)
    stopped = outcome.HolmLevel(rank=4, family_size=7, alpha=0.05 / 4, reached=False)
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [], stopped)
    assert judgement.observed_direction == "inconclusive" and "Holm step-down stopped" in judgement.reasons[0]


def test_the_p1_family_is_every_rung_judged_against_a_parent():
    members = family_members(KNOBS, "p1", "embedded")
    assert "fp32-floor" not in members  # a root: judged against its bounds only
    assert {"near-aligned", "fp8-rollout", "top-p", "top-k", "temperature", "stale-weights", "fp8-plus-filters"} <= set(members)
    # on VIME the fp32 floor is skipped, so near-aligned has no parent to be judged against
    assert "near-aligned" not in family_members(KNOBS, "p1", "vime")


def test_an_incomplete_member_counts_in_the_family_with_p_one(build_run):
    good = build_run("good", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    nan_run = build_run("nan", rung="top-k", abs_diff=lambda n: float("nan") if n == 9 else 0.03)

    def fetch(rung, **overrides):
        return nan_run if rung == "top-k" else good

    levels = family_levels(KNOBS, "p1", "embedded", fetch)
    size = len(family_members(KNOBS, "p1", "embedded"))
    assert levels["top-k"].family_size == size and levels["top-k"].rank == size


def test_a_rung_with_a_nan_step_fails_naming_it(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    child = build_run("child", rung="top-k", abs_diff=lambda n: float("nan") if n in (7, 12) else 0.03)
    runs = {("top-k", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["top-k"], KNOBS, fetcher(runs), lambda run: [])
    assert judgement.problems and "2 missing step(s)" in judgement.problems[0] and "non-finite at steps 7, 12" in judgement.problems[0]


def test_a_parent_with_unlogged_steps_fails_naming_them(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05), drop_metric_at=(4,))
    child = build_run("child", rung="top-k", abs_diff=noisy(0.03, 0.05))
    runs = {("top-k", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["top-k"], KNOBS, fetcher(runs), lambda run: [])
    assert judgement.problems and "near-aligned" in judgement.problems[0] and "not logged at steps 4" in judgement.problems[0]


def test_a_short_run_fails_with_its_count_and_the_knob(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, 0.05))
    child = build_run("child", rung="top-k", steps=12, abs_diff=noisy(0.03, 0.05))
    runs = {("top-k", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["top-k"], KNOBS, fetcher(runs), lambda run: [])
    assert any("thresholds.min_judged_steps" in p and "10 finite step(s)" in p for p in judgement.problems), judgement.problems


def test_an_fp32_floor_of_exactly_zero_fails_its_lower_bound(build_run):
    rung = KNOBS.rungs["fp32-floor"]
    zero = build_run("zero", rung="fp32-floor", abs_diff=lambda n: 0.0)
    findings = expectation_findings(rung, judge_rung(rung, KNOBS, fetcher({("fp32-floor", ()): zero})), zero, KNOBS)
    assert any("thresholds.fp32_floor_min_abs_diff" in line and "< " in line for line in findings), findings
    floor = build_run("floor", rung="fp32-floor", abs_diff=noisy(4.7e-7, 0.1))
    assert not expectation_findings(rung, judge_rung(rung, KNOBS, fetcher({("fp32-floor", ()): floor})), floor, KNOBS)


def test_the_fp32_floor_runs_the_framework_probes(build_run):
    rung = KNOBS.rungs["fp32-floor"]
    floor = build_run("floor", rung="fp32-floor", abs_diff=noisy(4.7e-7, 0.1))
    judgement = judge_rung(rung, KNOBS, fetcher({("fp32-floor", ()): floor}), lambda run: ["probe 1 (sample identity): tokens differ"])
    assert judgement.drift_class == "framework" and "probe 1" in judgement.reasons[-1]
    findings = expectation_findings(rung, judgement, floor, KNOBS)
    assert any("decided 'framework'" in line for line in findings), findings


@pytest.mark.parametrize(
    ("delta", "se", "decided"),
    [
        (-0.0006, 0.0002, True),  # well below +E: the rung adds no drift of interest
        (0.0, 0.003, False),  # too wide: it might add E
        (0.0025, 0.0005, False),  # above E
    ],
)
def test_not_up_is_a_one_sided_bound_at_the_familys_bonferroni_level(delta, se, decided):
    result = outcome.not_up(diff_ci(delta, se), effect=0.002, alpha=0.05, family_size=7)
    assert result.confidence == pytest.approx(1 - 0.05 / 7)
    assert result.upper == pytest.approx(delta + scipy_stats.t.ppf(1 - 0.05 / 7, 20.0) * se)
    assert result.decided is decided, result.describe()


def test_an_inconclusive_delta_that_is_not_up_decides_class_none(build_run):
    """The AMD case of issue 14: temperature lowers the drift a little, not decisively; the rung is
    still shown to add no drift of interest, which is all its expectation asks."""
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.0144, 0.2))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.0124, 0.3, seed=1))
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [], framework_not_checked=lambda run: [])
    assert judgement.observed_direction == "inconclusive", judgement.summary()
    assert judgement.evidence["decision"]["not_up"]["decided"], judgement.summary()
    assert judgement.drift_class == "none" and "not up" in judgement.summary()
    assert not expectation_findings(KNOBS.rungs["temperature"], judgement, child, KNOBS)
