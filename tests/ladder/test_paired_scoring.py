"""Paired per-token deltas on real scoring (vLLM + Megatron-Core, tiny model), on the ladder's own
P1 runs: the fp32 floor's recorded tokens, scored by its own configuration twice (two processes)
and by near-aligned's bf16 configuration, at the initial weights.

The scorer must reproduce what it re-builds (the parent's rollout 0 log-probs, sampled at the
initial weights, and the fp32 floor itself: small but not zero), the same configuration scored
twice must give a paired delta inside the fp32 floor's own bound, and bf16 against fp32 must give
a positive paired delta whose interval excludes zero. Scores are cached in each run's paired/
directory, so the ladder's own paired deltas reuse them.
"""

from __future__ import annotations

import json

import pytest

from harness.experiment import paired_scores
from harness.judge import paired
from harness.report.allure_attach import attach_text

pytestmark = pytest.mark.ladder

LADDER: dict = {}  # no overrides: the ladder's P1 runs, launched once per session


def test_the_fp32_configuration_scored_twice_gives_a_paired_delta_of_zero(get_run, knobs, tmp_path):
    parent = get_run("p1", "fp32-floor", "colocate", **LADDER)
    sequences, rollouts, recorded = paired_scores.parent_tokens(parent, int(knobs.threshold("paired_score_rollouts")))
    cached = paired_scores.scores(parent, sequences, parent.id)  # the run's cache, shared with the ladder
    fresh = paired_scores.scores(parent, sequences, parent.id, cache_dir=tmp_path)  # a second scorer process
    result = paired.compare(fresh, cached, knobs, child_id=f"{parent.id} (scored again)", parent_id=parent.id, rollouts=rollouts, recorded=recorded)
    attach_text(json.dumps(result.as_dict(), indent=1), "paired delta: fp32 floor against itself")
    floor_max, floor_min = knobs.threshold("fp32_floor_max_abs_diff"), knobs.threshold("fp32_floor_min_abs_diff")
    assert result.replay_check is not None and result.replay_check["rollout_side_max_abs"] <= floor_max, (
        f"the scorer's vLLM side does not reproduce the parent's rollout 0: {result.replay_check}"
    )
    assert floor_min <= result.parent_mean <= floor_max, (
        f"fp32 floor on the recorded tokens: {result.parent_mean:.3g}, expected in [{floor_min}, {floor_max}]"
    )
    assert -floor_max <= result.diff.low and result.diff.high <= floor_max, result.summary()


def test_bf16_against_the_fp32_floor_is_a_positive_paired_delta(get_run, knobs):
    child, parent = get_run("p1", "near-aligned", "colocate", **LADDER), get_run("p1", "fp32-floor", "colocate", **LADDER)
    result = paired_scores.paired_delta(child, parent, knobs)
    attach_text(
        result.summary() if isinstance(result, paired.NotChecked) else json.dumps(result.as_dict(), indent=1),
        "paired delta: near-aligned vs fp32 floor",
    )
    assert isinstance(result, paired.PairedDelta), result.summary()
    assert result.diff.low > 0, result.summary()
    assert result.child_mean > result.parent_mean, result.summary()
