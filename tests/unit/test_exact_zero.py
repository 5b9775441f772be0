"""The exactly-zero judge (harness.judge.exact_zero) on runs built to pass and runs built to fail:
the true-on-policy rung tolerates nothing, so the smallest value, a NaN or a missing step fails."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness import DEFAULT_KNOBS_DIR
from harness.judge.expectations import bound_findings
from harness.spec import load_knobs
from harness.spec.schema import Expectation
from tests.unit.conftest import vime_line

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
RUNG = KNOBS.rungs["true-on-policy"]


def _run(build_run, name, *, abs_diff=lambda n: 0.0, ppo_kl=lambda n: 0.0, drop_metric_at=(), steps=30):
    kl_lines = [vime_line("step", n, {"train/ppo_kl": ppo_kl(n)}) for n in range(steps)]
    return build_run(name, rung="true-on-policy", steps=steps, abs_diff=abs_diff, extra_lines=kl_lines, drop_metric_at=drop_metric_at)


# The rung as it once was: ppo_kl exactly zero too (what the parent's zero check below refuses).
WITH_KL = RUNG.model_copy(
    update={"expect": RUNG.expect.model_copy(update={"exactly_zero_every_step": [*RUNG.expect.exactly_zero_every_step, "train/ppo_kl"]})}
)


def test_the_rung_declares_its_abs_diff_exactly_zero():
    assert RUNG.expect.exactly_zero_every_step == ["train/train_rollout_logprob_abs_diff"]


def test_a_zero_the_parent_shows_too_is_no_evidence(build_run):
    """Every embedded run logs train/ppo_kl 0.0 at every step (one optimizer step per rollout): a
    rung expected to hold it exactly zero passed on a check that could not see a difference."""
    child = _run(build_run, "child")
    parent = _run(build_run, "parent", abs_diff=lambda n: 1.4e-3)  # the parent drifts; its ppo_kl is 0 like every run's
    assert bound_findings(WITH_KL, child, KNOBS) == []  # alone, a zero is a zero
    (finding,) = bound_findings(WITH_KL, child, KNOBS, parent)
    assert "train/ppo_kl is exactly 0.0 at every step of the parent's run" in finding
    moving = _run(build_run, "moving", abs_diff=lambda n: 1e-3, ppo_kl=lambda n: 1e-4)
    assert bound_findings(WITH_KL, child, KNOBS, moving) == []


def test_zero_at_every_step_passes(build_run):
    assert bound_findings(RUNG, _run(build_run, "exact"), KNOBS) == []


def test_one_tiny_value_fails_and_names_its_step(build_run):
    run = _run(build_run, "one-ulp", abs_diff=lambda n: 1e-12 if n == 17 else 0.0)
    (finding,) = bound_findings(RUNG, run, KNOBS)
    assert "train/train_rollout_logprob_abs_diff is not exactly 0.0 at 1 of 30 steps: first step 17 = 1e-12" in finding
    assert "expect.exactly_zero_every_step" in finding


def test_a_negative_kl_and_a_nan_both_fail(build_run):
    run = _run(build_run, "kl", ppo_kl=lambda n: {3: -2e-9, 9: float("nan")}.get(n, 0.0))
    (finding,) = bound_findings(WITH_KL, run, KNOBS)
    assert "train/ppo_kl is not exactly 0.0 at 2 of 30 steps: first step 3 = -2e-09" in finding


def test_a_missing_step_fails(build_run):
    run = _run(build_run, "gap", drop_metric_at=(5,))
    (finding,) = bound_findings(RUNG, run, KNOBS)
    assert "not logged at 1 of 30 steps (first: step 5)" in finding


def test_a_metric_name_must_look_like_one():
    with pytest.raises(ValidationError, match="not a metric name"):
        Expectation.model_validate({"class": "none", "direction": "flat", "exactly_zero_every_step": ["abs diff"]})
