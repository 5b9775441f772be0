"""The paired per-token delta's judge, on fixed arrays and hand-built runs (no engine): the cluster
bootstrap interval (estimate, collapse, coverage, why clusters), which rung pairs are scored and
which are not checked, and that a scored pair is read back from the run's cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.experiment import paired_scores
from harness.judge import paired
from harness.judge.outcome import judge_outcome
from harness.judge.paired import NotChecked, PairedDelta, cluster_bootstrap_diff, not_checked_reason
from harness.records.recorded_spec import RecordedSpec
from harness.records.runload import Run
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


# ------------------------------------------------------------------ the interval
def test_the_estimate_is_the_mean_over_sequences_of_each_sequences_mean():
    # VIME's sample mean: a 4-token sequence and a 1-token one weigh the same.
    ci = cluster_bootstrap_diff([[1.0, 1.0, 1.0, 1.0], [0.0], [0.5, 0.5]])
    assert ci.diff == pytest.approx(0.5)


def test_identical_sequence_means_give_a_zero_width_interval():
    ci = cluster_bootstrap_diff([[0.0, 0.0], [0.0], [0.0, 0.0, 0.0]])
    assert (ci.diff, ci.low, ci.high, ci.excludes_zero) == (0.0, 0.0, 0.0, False)


def test_the_interval_is_seeded_and_the_seed_matters():
    rng = np.random.default_rng(3)
    data = [rng.normal(0.1, 1.0, size=rng.integers(1, 20)) for _ in range(40)]
    assert cluster_bootstrap_diff(data, seed=5) == cluster_bootstrap_diff(data, seed=5)
    assert cluster_bootstrap_diff(data, seed=5).low != cluster_bootstrap_diff(data, seed=6).low


def test_the_half_width_matches_the_t_interval_of_the_sequence_means():
    # Independent sequence means: the bootstrap SE is sd / sqrt(n) up to resampling noise.
    rng = np.random.default_rng(11)
    means = rng.normal(0.3, 1.0, size=200)
    ci = cluster_bootstrap_diff([[m] for m in means], n_resamples=4000)
    expected = 1.972 * means.std(ddof=1) / np.sqrt(len(means))  # t(199) at 97.5%
    assert (ci.high - ci.low) / 2 == pytest.approx(expected, rel=0.1)
    assert ci.df == 199


def test_clusters_widen_the_interval_when_a_sequences_tokens_move_together():
    # Each sequence shifts all its tokens by one draw (shared prefix): a token-level i.i.d. interval
    # would be several times too narrow; the cluster interval is not.
    rng = np.random.default_rng(2)
    data = [rng.normal(0.0, 1.0) + rng.normal(0.0, 0.1, size=20) for _ in range(50)]
    cluster = cluster_bootstrap_diff(data)
    tokens = np.concatenate(data)
    naive_half = 1.96 * tokens.std(ddof=1) / np.sqrt(len(tokens))
    assert (cluster.high - cluster.low) / 2 > 3 * naive_half


def test_the_95_percent_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    covered = 0
    trials = 300
    for trial in range(trials):
        # Skewed per-token differences (|.|-like) around a true mean of 1.0, 30 sequences of 5-25 tokens.
        data = [rng.exponential(1.0, size=rng.integers(5, 26)) for _ in range(30)]
        ci = cluster_bootstrap_diff(data, n_resamples=1000, seed=trial)
        covered += ci.low <= 1.0 <= ci.high
    assert 0.90 <= covered / trials <= 0.99, f"coverage {covered / trials:.3f}"


@pytest.mark.parametrize(
    "data, message",
    [
        ([[1.0, 2.0]], "at least 2"),
        ([[1.0], []], "no tokens"),
        ([[1.0], [float("nan")]], "not a finite"),
    ],
)
def test_unusable_input_is_one_clear_error(data, message):
    with pytest.raises(ValueError, match=message):
        cluster_bootstrap_diff(data)


def test_the_interval_is_judged_by_the_ladders_outcome_rule():
    ci = cluster_bootstrap_diff([[1e-3 + 1e-5 * i] for i in range(50)])
    assert judge_outcome(ci, 1e-4, 0.95).direction == "up"


# ------------------------------------------------------------------ which pairs are scored
NEAR_ALIGNED = {"bf16": True, "vllm-dtype": "bfloat16", "rollout-temperature": 1.0, "rollout-top-p": 1.0, "rollout-top-k": -1, "seed": 7}


def _run(tmp_path: Path, name: str, backend: str = "embedded", dumps=("rollout_0.pt",), **flags) -> Run:
    values = dict(NEAR_ALIGNED, **flags)
    values = {k: v for k, v in values.items() if v is not None}
    argv = ["python", "-m", "harness.embedded.train"] + [t for k, v in values.items() for t in ([f"--{k}"] if v is True else [f"--{k}", str(v)])]
    spec = RecordedSpec(recorded=True, flags_from="spec.yaml", rung=name, backend=backend, flags=values)
    return Run(id=name, path=tmp_path / name, spec=spec, argv=argv, dumps=list(dumps))


def test_a_precision_rung_is_scored(tmp_path):
    parent = _run(tmp_path, "fp32-floor", bf16=None, **{"vllm-dtype": "float32"})
    assert not_checked_reason(_run(tmp_path, "near-aligned"), parent, KNOBS) is None
    assert not_checked_reason(_run(tmp_path, "fp8-rollout", **{"vllm-quantization": "fp8"}), _run(tmp_path, "near-aligned"), KNOBS) is None


@pytest.mark.parametrize(
    "child_flags, child_backend, parent_dumps, says",
    [
        ({"rollout-top-p": 0.95}, "embedded", ("rollout_0.pt",), "prompt log-probs are raw"),
        ({"rollout-temperature": 0.8}, "embedded", ("rollout_0.pt",), "prompt log-probs are raw"),
        ({"embedded-inject": "stale-weights:10"}, "embedded", ("rollout_0.pt",), "injects a fault"),
        ({"seed": 8}, "embedded", ("rollout_0.pt",), "changes ['seed']"),
        ({"tensor-model-parallel-size": 2}, "embedded", ("rollout_0.pt",), "TP > 1"),
        ({}, "vime", ("rollout_0.pt",), "backend 'vime'"),
        ({"vllm-quantization": "fp8"}, "embedded", ("train_0_0.pt",), "no rollout dumps"),
    ],
)
def test_a_pair_that_cannot_be_scored_on_shared_tokens_is_not_checked(tmp_path, child_flags, child_backend, parent_dumps, says):
    child = _run(tmp_path, "child", backend=child_backend, **child_flags)
    parent = _run(tmp_path, "parent", dumps=parent_dumps)
    result = paired_scores.paired_delta(child, parent, KNOBS)
    assert isinstance(result, NotChecked) and says in result.reason, result
    assert result.summary().startswith("paired per-token delta not checked: ")


# ------------------------------------------------------------------ the cache
def test_a_scored_pair_is_read_back_from_the_runs_cache_without_scoring(tmp_path, monkeypatch):
    import torch

    parent = _run(tmp_path, "parent", bf16=None, **{"vllm-dtype": "float32"})
    child = _run(tmp_path, "child")
    samples = [
        {"tokens": [1, 2, 3, 4], "prompt_ids": [1, 2], "response_length": 2, "rollout_log_probs": [-0.5, -0.25], "weight_versions": [0]},
        {"tokens": [1, 5, 6], "prompt_ids": [1], "response_length": 2, "rollout_log_probs": [-1.0, -2.0], "weight_versions": [0]},
    ]
    (parent.path / "dumps").mkdir(parents=True)
    torch.save({"rollout_id": 0, "samples": samples}, parent.path / "dumps" / "rollout_0.pt")
    sequences, _, _ = paired_scores.parent_tokens(parent, 3)
    key = paired_scores._tokens_hash(sequences)
    for run, gap in ((parent, 0.0), (child, 0.01)):
        cached = {"rollout": [[-0.5, -0.25], [-1.0, -2.0]], "trainer": [[-0.5 - gap, -0.25 + gap], [-1.0 - gap, -2.0 - gap]]}
        (run.path / "paired").mkdir(parents=True, exist_ok=True)
        (run.path / "paired" / f"scores-on-parent-{key}.json").write_text(json.dumps(cached))

    def no_scoring(*args, **kwargs):
        raise AssertionError("the scorer ran although both runs hold cached scores")

    monkeypatch.setattr(paired_scores.subprocess, "run", no_scoring)
    result = paired_scores.paired_delta(child, parent, KNOBS)
    assert isinstance(result, PairedDelta), result
    assert result.diff.diff == pytest.approx(0.01) and result.sequences == 2 and result.tokens == 4
    assert result.replay_check == {"sequences": 2, "rollout_side_max_abs": 0.0}
    assert "initial weights" in result.summary() and result.as_dict()["measured_at"] == paired.MEASURED_AT
