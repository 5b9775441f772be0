"""Margins in standard errors (harness.judge.margin), the design's sample sizes (harness.judge.design),
and the design file against the rung files and knobs/ab.yaml (knobs/design.yaml)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from harness import DEFAULT_KNOBS_DIR
from harness.judge.design import needed_sample, relative_sd, side_variance
from harness.judge.margin import below_minimum, bound_margin, interval_critical, noninferiority_margin, outcome_margin
from harness.spec import load_knobs
from harness.spec.design_file import load_design

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
DESIGN = load_design(DEFAULT_KNOBS_DIR)


def test_a_margin_is_the_signed_distance_to_the_answers_boundary_in_standard_errors():
    assert outcome_margin("up", 5.0, 1.0, 2.0).se_units == pytest.approx(3.0)
    assert outcome_margin("down", -5.0, 1.0, 2.0).se_units == pytest.approx(3.0)
    assert outcome_margin("flat", 0.5, 0.5, 2.0).se_units == pytest.approx(3.0)
    assert outcome_margin("flat", -1.5, 0.5, 2.0).boundary == -2.0
    # On the wrong side of its boundary the margin is negative: an "up" that is below +E.
    assert outcome_margin("up", 1.0, 1.0, 2.0).se_units == pytest.approx(-1.0)
    assert noninferiority_margin(-0.027, 0.021, 0.067).se_units == pytest.approx((0.067 - 0.027) / 0.021)
    assert bound_margin(1.6e-7, 1e-8, 1e-5, upper=True).se_units > 900
    assert math.isnan(outcome_margin("up", 1.0, float("nan"), 0.5).se_units)


def test_an_interval_decided_answer_is_measured_from_where_its_interval_flips_it():
    """The fp8-rollout rung under the AVX2 settings at seed offset +300 (docs/results.md): delta
    +0.003283 with a 98.33% interval [+0.000162, +0.006404] on 2 degrees of freedom against the
    effect of interest 0.000177 was inconclusive, though the estimate sat 7.3 SE past the effect:
    its interval needed t = 7.65 SE. Measured from where the decision flips, the margin is negative."""
    low, high, diff, effect = 0.000162, 0.006404, 0.003283, 0.000177
    se = (high - low) / 2 / stats.t.ppf(1 - (1 - 0.9833) / 2, 2)
    critical = interval_critical(low, high, se)
    assert critical == pytest.approx(stats.t.ppf(1 - (1 - 0.9833) / 2, 2))
    from_effect = outcome_margin("up", diff, se, effect)
    from_decision = outcome_margin("up", diff, se, effect, critical=critical)
    assert from_effect.se_units > 3 and from_decision.se_units < 0
    assert below_minimum(from_decision, 3.0) and from_decision.critical == critical
    assert interval_critical(float("nan"), 1.0, 1.0) == 0.0  # an interval that cannot be read adds nothing


def test_an_answer_under_the_minimum_or_unmeasured_is_flagged():
    assert below_minimum(outcome_margin("up", 4.0, 1.0, 2.0), 3.0)  # 2 SE
    assert not below_minimum(outcome_margin("up", 6.0, 1.0, 2.0), 3.0)
    assert below_minimum({"se_units": float("nan")}, 3.0)
    assert not below_minimum(None, 3.0)


def test_the_design_asks_for_more_seeds_the_closer_an_effect_sits_to_its_boundary():
    spread = [1.0, 1.05, 0.95, 1.02, 0.98]
    parent = side_variance(spread, [0.001] * 5, 28)
    far = side_variance([2 * x for x in spread], [0.001] * 5, 28)
    near = side_variance([x + 0.4 for x in spread], [0.001] * 5, 28)
    need_far = needed_sample("up", parent, far, 0.25, 4.65, 0.005)
    need_near = needed_sample("up", parent, near, 0.25, 4.65, 0.005)
    assert need_far.seeds is not None and need_near.seeds is not None and need_near.seeds > need_far.seeds
    # At the seeds it found, the expected margin clears the target.
    assert need_near.boundary_distance / need_near.se_at_need >= 4.65
    # An effect on its boundary: no sample moves it off.
    on_boundary = side_variance([x + 0.25 for x in spread], [0.001] * 5, 28)
    assert needed_sample("up", parent, on_boundary, 0.25, 4.65, 0.005).seeds is None


def test_a_sides_variance_is_its_run_means_spread_split_by_moments():
    """The judge's estimator (harness.judge.variance): a run mean's variance across seeds is the run
    means' sample variance, whatever the steps share; the seed part is that less the steps' noise, by
    moments and not truncated (negative where the seeds agree more than their steps would say)."""
    steady = side_variance([1.0, 1.001, 0.999], [1e-4] * 3, 28)
    spread = side_variance([0.7, 1.0, 1.3], [1e-4] * 3, 28)
    assert steady.seed < 0 < spread.seed
    assert spread.between == pytest.approx(float(np.var([0.7, 1.0, 1.3], ddof=1)))
    assert relative_sd(spread) == pytest.approx(float(np.std([0.7, 1.0, 1.3], ddof=1)))


def test_every_rung_expectation_is_what_its_design_question_decided():
    """A rung expects the answer its design measured on the design seeds where the design sized it, and
    sends it to a named report where the design did not: no answer is exempt, none is expected unsized."""
    problems = []
    for rung in KNOBS.rungs.values():
        if rung.parent is None:
            continue
        question = DESIGN.question(f"ladder/{rung.id}")
        if question is None or "missing" in question:
            problems.append(f"ladder/{rung.id}.yaml: no design measurement in knobs/design.yaml")
            continue
        if question["expected"] and rung.expect.direction != question["answer"]:
            problems.append(f"ladder/{rung.id}.yaml: expects {rung.expect.direction!r}, its design measured {question['answer']!r} (sized)")
        if not question["expected"] and "direction" not in rung.expect.reported:
            problems.append(
                f"ladder/{rung.id}.yaml: expects {rung.expect.direction!r}, but its design needs {question['seeds_needed']} seeds a side "
                f"(affordable: {question['affordable']}): it must leave for a named report"
            )
    assert not problems, "\n  ".join(problems)


def test_the_judging_seed_is_the_stage_seed_and_no_seed_range_is_shared():
    seeds = {stage.embedded.get("seed") for stage in KNOBS.stages.values() if stage.embedded.get("seed") is not None}
    assert seeds == {DESIGN.seeds.judging}, f"knobs/stages.yaml seeds {seeds} vs knobs/design.yaml seeds.judging {DESIGN.seeds.judging}"
    assert DESIGN.seeds.design != DESIGN.seeds.judging


def test_a_seed_range_reaches_as_far_as_the_ab_pairs_and_an_overlap_is_refused():
    """The A/B judges ab_pairs seeds from the judging seed (2026..2030 at 5 pairs), more than the
    replicates and the A/A check's seed + 1 (2026..2029): a sweep offset of +4 would re-judge the
    fifth pair's seed and must be refused."""
    ranges = DESIGN.seed_ranges()
    assert len(ranges["seeds.judging"]) == max(DESIGN.seeds.replicates + 1, DESIGN.affordable.ab_pairs)
    data = DESIGN.model_dump()
    data["seeds"]["sweep_offsets"] = [DESIGN.affordable.ab_pairs - 1]
    with pytest.raises(ValueError, match="overlap"):
        type(DESIGN).model_validate(data)


def test_acceptance_and_ab_expectations_are_what_their_design_questions_decided():
    from harness.spec.schema import Reported

    problems = []
    for criterion in KNOBS.acceptance.criteria:
        question = DESIGN.question(f"acceptance/{criterion.id}")
        reported = "embedded" in criterion.reported
        if question is None or "missing" in question:
            problems.append(f"acceptance.yaml {criterion.id}: no design measurement")
        elif question["expected"] == reported:
            problems.append(f"acceptance.yaml {criterion.id}: reported on embedded={reported}, design expected={question['expected']}")
    pairs = KNOBS.ab.replicates.embedded
    for candidate in [None, *KNOBS.ab.candidates]:
        for name in ("drift-reduced", "reward-preserved"):
            question = DESIGN.question(f"ab/{candidate or 'pair'}/{name}")
            expected, _ = KNOBS.ab.expected_to_pass(name, "embedded", candidate)
            if question is None or "missing" in question:
                problems.append(f"ab {candidate or 'pair'} {name}: no design measurement")
                continue
            needed = question["seeds_needed"]
            sized = isinstance(needed, int) and needed <= pairs
            if not isinstance(expected, Reported) and not sized:
                problems.append(f"ab {candidate or 'pair'} {name}: expected, but its design needs {needed} pairs (the A/B runs {pairs})")
            if expected is False and question["answer"] != "flat":
                problems.append(f"ab {candidate or 'pair'} {name}: a decided no is flat; its design measured {question['answer']}")
            if expected is True and question["answer"] not in ("down", "not worse"):
                problems.append(f"ab {candidate or 'pair'} {name}: expected yes, its design measured {question['answer']}")
    mode_pairs = KNOBS.ab.mode_pairs.embedded
    for mode in ("colocate", "non-colocate"):
        question = DESIGN.question(f"ab/mode-consistency/{mode}")
        if question is None or "missing" in question or question["answer"] != "flat" or question["seeds_needed"] > mode_pairs:
            problems.append(f"mode consistency in {mode}: expected consistent (flat in both), design {question}")
    assert not problems, "\n  ".join(problems)


def test_each_questions_band_is_its_own_references_and_no_band_is_a_control():
    """No pool: every question's effect of interest is its reference spec's A/A band (or a user-facing
    margin the file names), measured on that spec's own design seeds; a planted fault is never a
    reference, so a control's spread widens no band."""
    from harness.judge.effects import question_effect

    effects = KNOBS.effects
    controls = {rung.id for rung in KNOBS.rungs.values() if any("inject" in flag for flag in rung.changes.embedded)}
    assert controls == {"stale-weights"}
    for key, question in effects.questions.items():
        assert question.reference.split("@")[0] not in controls, key
        if question.user_facing is None:
            assert effects.spread(question.reference, question.metric) is not None, f"knobs/effects.yaml: {key}: its reference has no A/A spread"
    near = question_effect(KNOBS, "ladder/fp8-rollout", 1.0)
    rollout = question_effect(KNOBS, "ladder/fp8-plus-filters", 1.0)
    assert near.relative == pytest.approx(2 * effects.spread("near-aligned").relative_sd)
    assert rollout.relative == pytest.approx(2 * effects.spread("fp8-rollout").relative_sd)
    assert question_effect(KNOBS, "ladder/near-aligned", 1.6e-7).value == KNOBS.threshold("rung_min_abs_delta")
    assert question_effect(KNOBS, "ladder/tis", 0.01).relative == effects.user_facing["worth-adopting"].relative


def test_ab_pairs_are_sized_with_the_pairs_own_spread_and_degrees_of_freedom():
    from harness.judge.design import needed_pairs

    # Seed offset +400's A/B drift question: three pairs whose mean differences disagree beyond their
    # steps' noise; the judge's interval then has 2 degrees of freedom (t = 4.30) and a distance of
    # 4.2 SE from the flat band's edge was inconclusive.
    differences = side_variance([-0.00074, -0.00002, -0.00012], [1.0e-8, 1.0e-8, 1.0e-8], 28)
    need = needed_pairs("flat", differences, 0.00123, 4.65, 0.05)
    assert 4.0 < need.margin_at_measured < 4.65  # three pairs: short of the target
    assert need.seeds is not None and need.seeds > 3
    # The same pairs judged as if only the steps' noise counted would have asked for fewer.
    quiet = side_variance([-0.00029] * 3, [1.0e-8] * 3, 28)
    assert needed_pairs("flat", quiet, 0.00123, 4.65, 0.05).seeds < need.seeds
    # Never one pair: one pair's interval has no seed-to-seed part at all.
    assert needed_pairs("flat", side_variance([0.0, 0.0], [1e-14, 1e-14], 28), 0.00123, 4.65, 0.05).seeds == 2
    # A difference on the boundary cannot be sized off it.
    assert needed_pairs("flat", side_variance([0.00123] * 3, [1e-8] * 3, 28), 0.00123, 4.65, 0.05).seeds is None


def test_the_design_sizes_for_the_judges_own_se_estimate_and_welch_degrees_of_freedom():
    from harness.judge.design import se_scatter, welch_df

    assert se_scatter(2) == pytest.approx(math.sqrt(stats.chi2.ppf(0.95, 2) / 2))
    assert se_scatter(2) > 1.7 > se_scatter(4) > se_scatter(40) > 1.0
    assert welch_df([1.0, 1e-6], [2, 2]) == pytest.approx(2, rel=1e-3)  # one side dominates: its own df
    assert welch_df([1.0, 1.0], [2, 2]) == pytest.approx(4)  # equal sides: the sum


def test_the_ladders_replicates_are_the_designs():
    for stage_id, stage in KNOBS.stages.items():
        if stage.replicates is not None and stage_id == "p1":
            assert stage.replicates.embedded == DESIGN.seeds.replicates, "knobs/stages.yaml p1 replicates vs knobs/design.yaml seeds.replicates"
            assert stage.replicates.embedded <= DESIGN.affordable.seeds_per_side
