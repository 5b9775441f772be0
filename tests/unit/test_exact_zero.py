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


def test_the_rung_declares_both_metrics_exactly_zero():
    assert RUNG.expect.exactly_zero_every_step == ["train/train_rollout_logprob_abs_diff", "train/ppo_kl"]


def test_zero_at_every_step_passes(build_run):
    assert bound_findings(RUNG, _run(build_run, "exact"), KNOBS) == []


def test_one_tiny_value_fails_and_names_its_step(build_run):
    run = _run(build_run, "one-ulp", abs_diff=lambda n: 1e-12 if n == 17 else 0.0)
    (finding,) = bound_findings(RUNG, run, KNOBS)
    assert "train/train_rollout_logprob_abs_diff is not exactly 0.0 at 1 of 30 steps: first step 17 = 1e-12" in finding
    assert "expect.exactly_zero_every_step" in finding


def test_a_negative_kl_and_a_nan_both_fail(build_run):
    run = _run(build_run, "kl", ppo_kl=lambda n: {3: -2e-9, 9: float("nan")}.get(n, 0.0))
    (finding,) = bound_findings(RUNG, run, KNOBS)
    assert "train/ppo_kl is not exactly 0.0 at 2 of 30 steps: first step 3 = -2e-09" in finding


def test_a_missing_step_fails(build_run):
    run = _run(build_run, "gap", drop_metric_at=(5,))
    (finding,) = bound_findings(RUNG, run, KNOBS)
    assert "not logged at 1 of 30 steps (first: step 5)" in finding


def test_a_metric_name_must_look_like_one():
    with pytest.raises(ValidationError, match="not a metric name"):
        Expectation.model_validate({"class": "none", "direction": "flat", "exactly_zero_every_step": ["abs diff"]})
