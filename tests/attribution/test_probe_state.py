"""Probe 2 (model state) from a digest of the weights each engine holds, never from version labels alone.

Built runs whose cause is known by construction: equal digests pass, a digest that differs fails
even when both sides' version labels agree (a sync that reported success while the engine kept other
weights), and a run with version labels only is "not checked", so its class names what it needs.
"""

from __future__ import annotations

import pytest
import torch
from attribution_builders import build_run, rewrite

from harness.attribution.probes import WEIGHT_DIGEST_FIELD, framework_checks, run_probes
from harness.records.rundir import RunDir

pytestmark = pytest.mark.attribution


def _state(run_dir):
    return framework_checks(RunDir(run_dir).load())[1]


def test_equal_digests_pass_with_the_count_compared(tmp_path):
    state = _state(build_run(tmp_path))
    assert state.status == "pass", state.verdict
    assert state.evidence["weight_digests_compared"] == 2 * 4  # every sample of both steps
    assert WEIGHT_DIGEST_FIELD in state.verdict


def test_digest_that_differs_fails_although_versions_agree(tmp_path):
    path = build_run(tmp_path)

    def engine_kept_old_weights(data):
        for sample in data["samples"]:
            sample["consistency_metadata"]["weights_sha"] = "weights-0"

    rewrite(path / "dumps" / "rollout_1.pt", engine_kept_old_weights)
    state = _state(path)
    assert state.status == "fail", state.verdict
    assert WEIGHT_DIGEST_FIELD in state.verdict and "rollout 1" in state.verdict
    assert not any("weight_version" in line for line in state.evidence["mismatches"])  # the labels agreed


def test_stale_weights_fail_on_the_digest(tmp_path, knobs):
    report = run_probes(RunDir(build_run(tmp_path, fault="stale-weights", rollout_dtype=torch.bfloat16)).load(), knobs)
    assert (report.drift_class, report.decided_by) == ("framework", 2)
    assert any(WEIGHT_DIGEST_FIELD in line for line in report.probes[1].evidence["mismatches"])


def test_version_labels_alone_are_not_checked(tmp_path, knobs):
    report = run_probes(RunDir(build_run(tmp_path, weight_digests=False)).load(), knobs)
    state = report.probes[1]
    assert state.status == "not checked" and "do not read it" in state.verdict
    assert state.evidence["compared"].get("weight_version") == 2 * 4  # the labels were there and agreed
    assert report.drift_class == "undecided" and report.needs == ["probe 2 (model state)"], report.label


def test_label_mismatch_still_fails_without_digests(tmp_path):
    state = _state(build_run(tmp_path, fault="stale-weights", weight_digests=False))
    assert state.status == "fail" and "weight_version" in state.verdict


def test_operator_run_compares_the_operator_on_both_lm_heads(tmp_path, knobs):
    """--embedded-logprob-operator: both sides' LM heads are that operator (fp32 logits from the
    operands), so probe 7 compares it with itself and probe 3 reads the heads as fp32."""
    path = build_run(tmp_path, rollout_dtype=torch.bfloat16)
    for step in range(2):
        rewrite(path / "dumps" / f"probe_{step}.pt", lambda data: data.update(logprob_operator="fused-linear-logprob"))
    probes = {p.number: p for p in run_probes(RunDir(path).load(), knobs).probes}
    paths = probes[7].evidence["bundles"][0]
    assert paths["rollout_path"] == paths["trainer_path"] == "fused-linear-logprob"
    assert probes[7].status == "not measured" and probes[7].evidence["would_have_said"]["status"] == "pass"
    assert probes[3].evidence["bundles"][0]["lm_head_divergence_rollout_vs_trainer"]["max"] == 0.0  # one head on both sides


def _with_coverage(path, tensors: int) -> None:
    coverage = {"tensors": tensors, "not_comparable": [], "differing": []}
    for step in range(2):
        rewrite(path / "dumps" / f"probe_{step}.pt", lambda data: data.update(weight_digest=coverage))


def test_the_digests_coverage_is_reported(tmp_path):
    path = build_run(tmp_path)
    _with_coverage(path, 7)
    state = _state(path)
    assert state.status == "pass" and "7 tensors hashed a step, 0 not comparable" in state.verdict, state.verdict
    assert state.evidence["weight_digest_coverage"] == {s: {"tensors": 7, "not_comparable": [], "differing": []} for s in (0, 1)}


def test_digests_over_no_tensor_are_not_checked(tmp_path):
    """Two digests of nothing are equal: an engine whose parameter names no longer match the
    trainer's layout must not pass probe 2."""
    path = build_run(tmp_path)
    _with_coverage(path, 0)
    state = _state(path)
    assert state.status == "not checked" and "hash no tensor" in state.verdict, state.verdict
