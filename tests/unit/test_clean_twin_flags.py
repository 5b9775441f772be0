"""The planted fault's clean twin is the run's configuration less its fault flag and nothing else
(harness.experiment.budget_scores: the scorer builds it from the run's own argv)."""

from __future__ import annotations

from harness.experiment.budget_scores import INJECT_FLAG, _drop


def test_the_clean_twin_drops_the_fault_flag_and_its_value_only():
    argv = ["--seed", "7001", "--embedded-inject", "trainer-softmax-bf16", "--bf16", "--rollout-top-p", "0.9", "--embedded-levers", "a", "b"]
    assert _drop(argv, (INJECT_FLAG,)) == ["--seed", "7001", "--bf16", "--rollout-top-p", "0.9", "--embedded-levers", "a", "b"]
    assert _drop(argv, ()) == argv
    assert _drop(["--embedded-inject-extra", "x"], (INJECT_FLAG,)) == ["--embedded-inject-extra", "x"]  # a name, not a prefix
