"""The gate that tells an operator from a contract (harness.judge.candidate_gate), through the A/B's own
drift question on runs built to pass and to fail: a contract change is never "the operator reduced
drift", a planted fault must come out increased, and the seed's question 4 is answered from a bf16 and
an fp8 pair."""

from __future__ import annotations

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.judge import ab
from harness.judge.candidate_gate import CONTRACT, OPERATOR, PLANTED_FAULT, candidate_kind, gate_label, mixed_paths
from harness.records.metric_names import ABS_DIFF
from harness.spec import load_knobs
from tests.unit.conftest import vime_line, write_run

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
STEPS = 30
BASE = {"num-rollout": STEPS, "seed": 2026, "rollout-top-p": 0.95, "rollout-top-k": 40, "vllm-quantization": "fp8"}
TRUE_ON_POLICY = {"embedded-true-on-policy": True, "embedded-replay-processed-logprobs": True}
OPERATOR_FLAGS = {"embedded-linear-operator": "fp8-block-linear"}
FAULT = {"embedded-inject": "rollout-fp8-weight-bits:1"}


def drift_run(tmp_path, name, level, flags, seed):
    rng = np.random.default_rng(seed)
    lines = [vime_line("step", n, {ABS_DIFF: float(level * (1 + 0.03 * rng.standard_normal())), "rollout/raw_reward": 0.4}) for n in range(STEPS)]
    spec = {"run_id": name, "stage": "p3", "rung": "fp8-plus-filters", "mode": "colocate", "backend": "embedded", "flags": {**BASE, **flags}}
    return write_run(tmp_path / name, spec, lines)


def pair(tmp_path, flags, change):
    return drift_run(tmp_path, "baseline", 9e-3, {}, 1), drift_run(tmp_path, "candidate", 9e-3 * (1 + change), flags, 2)


def test_the_true_on_policy_candidate_is_a_contract_change_even_when_it_reduces_drift(tmp_path):
    kind = candidate_kind(BASE, {**BASE, **TRUE_ON_POLICY}, KNOBS)
    assert kind.kind == CONTRACT and "embedded-replay-processed-logprobs" in kind.flags and not kind.rejected
    answer = ab.drift_reduced(*pair(tmp_path, TRUE_ON_POLICY, -0.6), KNOBS)
    assert answer.evidence["outcome"] == "down" and answer.evidence["candidate_kind"]["kind"] == CONTRACT
    assert answer.message.startswith("contract change") and "the operator reduced drift" not in answer.message


def test_an_operator_path_alone_is_the_operators_answer(tmp_path):
    assert candidate_kind(BASE, {**BASE, **OPERATOR_FLAGS}, KNOBS).kind == OPERATOR
    answer = ab.drift_reduced(*pair(tmp_path, OPERATOR_FLAGS, -0.6), KNOBS)
    assert answer.message.startswith("the operator reduced drift"), answer.message
    flat = ab.drift_reduced(*pair(tmp_path / "flat", OPERATOR_FLAGS, 0.0), KNOBS)
    assert flat.evidence["outcome"] == "flat" and flat.message.startswith("the operator: no reduction"), flat.message


def test_a_planted_fault_is_caught_only_when_it_comes_out_increased(tmp_path):
    assert candidate_kind(BASE, {**BASE, **FAULT}, KNOBS).kind == PLANTED_FAULT
    caught = ab.drift_reduced(*pair(tmp_path, FAULT, +0.8), KNOBS)
    assert caught.evidence["outcome"] == "up" and "caught: increased" in caught.message
    missed = ab.drift_reduced(*pair(tmp_path / "missed", FAULT, 0.0), KNOBS)
    assert "NOT caught" in missed.message and "the operator" not in missed.message


def test_a_sampling_contract_change_is_rejected_before_any_drift_words():
    kind = candidate_kind(BASE, {**BASE, "rollout-top-p": 1.0, **OPERATOR_FLAGS}, KNOBS)
    assert kind.kind == CONTRACT and kind.rejected
    assert gate_label(kind, "down").startswith("contract change, not judged")


E = 1.5e-4


def _path(low: float, high: float) -> dict:
    return {
        "ci": [low, high],
        "effect_of_interest": E,
        "baseline_mean": 1.5e-3,
        "candidate_mean": 1.5e-3 + (low + high) / 2,
        "measured_by": "paired delta",
    }


@pytest.mark.parametrize(
    "bf16, fp8, expected",
    [
        (_path(-1e-5, 1e-5), _path(-1.8e-3, -0.7e-3), "no"),  # flat and down
        (_path(-1e-5, 1e-5), _path(-1.8e-3, -1e-4), "no"),  # a decrease not decided still rules an increase out
        (_path(2e-4, 4e-4), _path(-1.8e-3, -0.7e-3), "yes"),  # bf16 up
        (_path(-1e-5, 1e-5), _path(1e-4, 6e-4), "inconclusive"),  # fp8's interval reaches past +E
        (_path(-1e-5, 1e-5), {"outcome": "not judged"}, "inconclusive"),
    ],
)
def test_mixed_paths_answers_from_both_pairs(bf16, fp8, expected):
    answer = mixed_paths(bf16, fp8)
    assert answer.answer == expected, answer.message
