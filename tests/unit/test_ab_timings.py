"""The A/B timings question is judged against knobs, with the baseline's A/A spread as its noise
floor, and an A/B side with missing or NaN steps fails naming them (harness.judge.ab)."""

from __future__ import annotations

import numpy as np

from harness import DEFAULT_KNOBS_DIR
from harness.judge import ab
from harness.spec import load_knobs
from tests.unit.conftest import vime_line, write_run

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def timed_run(tmp_path, name, seconds, steps=30, skip_metric=None, nan_at=()):
    """A run whose four timings are `seconds` x (1 + 3% noise), seeded by its name."""
    rng = np.random.default_rng(sum(map(ord, name)))
    lines = []
    for n in range(steps):
        metrics = {"train/train_rollout_logprob_abs_diff": float("nan") if n in nan_at else 0.01, "rollout/raw_reward": 0.4}
        for metric in ab.TIMING_METRICS:
            if metric != skip_metric:
                metrics[metric] = float(seconds * (1 + rng.normal(0, 0.03)))
        lines.append(vime_line("step", n, metrics))
    return write_run(
        tmp_path / name,
        {"run_id": name, "stage": "p3", "rung": "x", "mode": "colocate", "backend": "embedded", "flags": {"num-rollout": steps}},
        lines,
    )


def test_equal_timings_pass_and_say_the_allowed_slowdown(tmp_path):
    answer = ab.timings(timed_run(tmp_path, "base", 2.0), timed_run(tmp_path, "cand", 2.0), KNOBS)
    assert answer.passed, answer.message
    assert "thresholds.ab_timing_max_rel_slowdown" in answer.message and set(answer.evidence) == {*ab.TIMING_METRICS, "unmeasured"}
    assert answer.evidence["unmeasured"] == []


def test_a_candidate_slower_beyond_the_noise_fails(tmp_path):
    answer = ab.timings(timed_run(tmp_path, "base", 2.0), timed_run(tmp_path, "cand", 2.6), KNOBS)
    assert not answer.passed and "slower" in answer.message, answer.message


def test_a_faster_candidate_passes(tmp_path):
    answer = ab.timings(timed_run(tmp_path, "base", 2.0), timed_run(tmp_path, "cand", 1.5), KNOBS)
    assert answer.passed and "faster" in answer.message, answer.message


def test_a_timing_the_candidate_does_not_log_fails(tmp_path):
    answer = ab.timings(timed_run(tmp_path, "base", 2.0), timed_run(tmp_path, "cand", 2.0, skip_metric="perf/update_weights_time"), KNOBS)
    assert not answer.passed and "perf/update_weights_time: not logged by the candidate" in answer.message
    assert answer.evidence["unmeasured"] == ["perf/update_weights_time"]


def test_timings_are_held_on_the_cluster_backends_and_reported_on_the_embedded_one():
    """On the embedded backend wall-clock leaves the main job's answers for the performance report
    (knobs/ab.yaml says why); on a cluster it is an expected answer, held like any other."""
    from harness.judge.held import hold_ab

    for candidate in [None, *KNOBS.ab.candidates]:
        expected, _ = KNOBS.ab.expected_to_pass("timings", "embedded", candidate)
        assert expected.report == "performance"
        assert KNOBS.ab.expected_to_pass("timings", "vime", candidate)[0] is True
    slower = ab.Answer("timings?", False, "perf/step_time slower", {"unmeasured": []})
    assert hold_ab(slower, KNOBS, "embedded", "timings").status == "reported"
    assert hold_ab(slower, KNOBS, "vime", "timings").status == "failed"


def test_an_ab_side_with_nan_steps_fails_naming_them(tmp_path):
    answer = ab.drift_reduced(timed_run(tmp_path, "base", 2.0), timed_run(tmp_path, "cand", 2.0, nan_at=(5, 21)), KNOBS)
    assert not answer.passed and "candidate" in answer.message and "non-finite at steps 5, 21" in answer.message, answer.message
