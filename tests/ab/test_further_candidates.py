"""knobs/ab.yaml `candidates` and the reward band, without runs: a further candidate's flags must be
operator-path or mitigation flags (one line naming the key otherwise), its expectations are its own,
and harness.judge.ab.within_aa_band passes a change inside the baseline's A/A band and fails one
outside it (runs built from VIME-format log lines, as a launched run gives them)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.judge import ab
from harness.records.metric_names import RAW_REWARD
from harness.spec import SpecError, load_knobs
from tests.unit.conftest import vime_line, write_run

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def reward_run(tmp_path, name: str, mean: float, noise: float = 0.05, steps: int = 30):
    """A finished run whose per-step reward is `mean` plus Gaussian noise, seeded by its name."""
    rng = np.random.default_rng(sum(map(ord, name)))
    lines = []
    for n in range(steps):
        lines.append(vime_line("step", n, {"train/train_rollout_logprob_abs_diff": 0.01}))
        lines.append(vime_line("rollout", n, {RAW_REWARD: float(mean + rng.normal(0, noise))}))
    return write_run(
        tmp_path / name,
        {"run_id": name, "stage": "p3", "rung": "x", "mode": "colocate", "backend": "embedded", "flags": {"num-rollout": steps}},
        lines,
    )


def test_the_same_reward_is_within_the_band(tmp_path):
    answer = ab.within_aa_band(reward_run(tmp_path, "native", 0.7), reward_run(tmp_path, "candidate", 0.7), RAW_REWARD, KNOBS)
    assert answer.passed, answer.message
    assert 0 < answer.evidence["aa_band"] and abs(answer.evidence["rel_diff"]) <= answer.evidence["aa_band"]


def test_a_reward_that_fell_by_half_is_outside_the_band(tmp_path):
    answer = ab.within_aa_band(reward_run(tmp_path, "native", 0.7), reward_run(tmp_path, "candidate", 0.35), RAW_REWARD, KNOBS)
    assert not answer.passed and "outside" in answer.message, answer.message


def test_a_reward_that_was_not_logged_is_not_within_any_band(tmp_path):
    answer = ab.within_aa_band(reward_run(tmp_path, "native", 0.7), reward_run(tmp_path, "candidate", 0.7), "rollout/not_logged", KNOBS)
    assert not answer.passed, answer.message


def test_the_true_on_policy_candidate_has_its_own_expectations():
    # The pair's candidate is expected not to reduce the drift on the embedded backend; true on-policy is.
    assert KNOBS.ab.expected_to_pass("drift-reduced", "embedded") == (False, KNOBS.ab.expect["embedded"].reason)
    assert KNOBS.ab.expected_to_pass("drift-reduced", "embedded", "true-on-policy")[0] is True


def test_a_candidate_flag_outside_the_operator_path_is_one_line(tmp_path):
    target = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, target)
    path = target / "ab.yaml"
    path.write_text(path.read_text().replace("      embedded-true-on-policy: true\n", "      rollout-top-p: 0.9\n", 1))
    with pytest.raises(SpecError) as err:
        load_knobs(target)
    (problem,) = err.value.problems
    assert "ab.yaml: candidates.true-on-policy.set: expected operator-path or mitigation flags" in problem and "'rollout-top-p'" in problem, problem
