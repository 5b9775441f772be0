"""The dlogp audit on hand-built dumps: figures checked against values worked out by hand, and every
kind of bad input the issue names producing its named warning (never a silent zero)."""

from __future__ import annotations

import math

import pytest
import torch
from attribution_builders import build_run, rewrite

from harness.attribution.audit import LOGGED_MATCH_RTOL, audit_run
from harness.records.rundir import RunDir

pytestmark = pytest.mark.attribution


def codes(audit) -> set[str]:
    return {w.rsplit("(code: ", 1)[1].rstrip(")") for w in audit.warnings if "(code: " in w}


def hand_run(tmp_path, train_lp, rollout_lp, mask, *, logged=None, rollout_key="rollout_log_probs"):
    """One step, one sample per entry of the lists; the train dump in VIME's format."""
    run = RunDir(tmp_path / "hand").create()
    run.write_spec({"flags": {}})
    samples = [
        {"tokens": list(range(3 + len(m))), "response_length": len(m), "loss_mask": m, "index": i, rollout_key: r}
        for i, (r, m) in enumerate(zip(rollout_lp, mask))
    ]
    torch.save({"rollout_id": 0, "samples": samples}, run.dumps_dir / "rollout_0.pt")
    data = {
        "tokens": [s["tokens"] for s in samples],
        "response_lengths": [len(m) for m in mask],
        "loss_masks": [torch.tensor(m, dtype=torch.float32) for m in mask],
        "log_probs": [torch.tensor(t) for t in train_lp],
        "sample_indices": list(range(len(mask))),
    }
    if rollout_key == "rollout_log_probs":
        data["rollout_log_probs"] = [torch.tensor(r) for r in rollout_lp]
    torch.save({"rollout_id": 0, "rank": 0, "rollout_data": data}, run.dumps_dir / "train_0_0.pt")
    if logged is not None:
        run.append_record({"kind": "step", "n": 0, "metrics": {"train/train_rollout_logprob_abs_diff": logged}})
    run.set_status("finished", exit_code=0)
    run.close()
    return run.path


def test_token_view_uses_rl_align_names_and_values(tmp_path):
    # Active dlogp values [0.0, 1.0, 0.5, 0.0] (RL-Align's own worked example); the masked 20.0 must not count.
    path = hand_run(
        tmp_path, train_lp=[[-1.0, -1.0, -21.0], [-0.5, -1.0, -2.0]], rollout_lp=[[-1.0, -2.0, -1.0], [-1.0, -1.0, -2.0]], mask=[[1, 1, 0], [1, 1, 0]]
    )
    audit = audit_run(RunDir(path).load())
    assert audit.rlk_audit_active_token_count == 4
    assert audit.rlk_audit_dlogp_abs_mean == pytest.approx(0.375)
    assert audit.rlk_audit_dlogp_abs_max == pytest.approx(1.0)
    assert audit.rlk_audit_dlogp_abs_p50 == pytest.approx(0.25)
    assert audit.per_step[0].rlk_audit_mask_coverage == pytest.approx(4 / 6)
    # ratio0 = exp(dlogp); approx_kl0 = ratio0 - 1 - dlogp; clipfrac0 counts |ratio0 - 1| > 0.2
    ratios = [1.0, math.e, math.exp(0.5), 1.0]
    assert audit.rlk_audit_ratio0_mean == pytest.approx(sum(ratios) / 4)
    assert audit.rlk_audit_approx_kl0 == pytest.approx(sum(r - 1 - d for r, d in zip(ratios, [0, 1, 0.5, 0])) / 4)
    assert audit.rlk_audit_clipfrac0 == pytest.approx(0.5)
    # VIME's sample mean: sample 0 -> (0 + 1) / 2, sample 1 -> (0.5 + 0) / 2; mean 0.375 here too, by chance of
    # equal lengths. The worst token is sample 0, response position 1.
    assert audit.per_step[0].sample_mean_abs_diff == pytest.approx(0.375)
    worst = audit.worst_tokens[0]
    assert (worst["sample_position"], worst["token_position"], worst["dlogp"]) == (0, 1, pytest.approx(1.0))
    assert worst["response_length"] == 3 and worst["prompt_length"] == 3
    assert worst["sampled_token_probability"] == pytest.approx(math.exp(-2.0))


def test_sample_mean_differs_from_token_mean_when_lengths_differ(tmp_path):
    # Sample 0: one active token |d| = 1; sample 1: three tokens |d| = 0. Sample mean 0.5, token mean 0.25.
    path = hand_run(tmp_path, train_lp=[[-2.0], [-1.0, -1.0, -1.0]], rollout_lp=[[-1.0], [-1.0, -1.0, -1.0]], mask=[[1], [1, 1, 1]], logged=0.5)
    audit = audit_run(RunDir(path).load())
    assert audit.per_step[0].sample_mean_abs_diff == pytest.approx(0.5)
    assert audit.rlk_audit_dlogp_abs_mean == pytest.approx(0.25)
    assert audit.per_step[0].matches_logged is True


def test_sample_mean_reproduces_the_logged_metric_of_a_built_run(tmp_path):
    audit = audit_run(RunDir(build_run(tmp_path, steps=3, rollout_dtype=torch.bfloat16)).load())
    assert [s.matches_logged for s in audit.per_step] == [True, True, True]
    for step in audit.per_step:
        assert step.sample_mean_abs_diff == pytest.approx(step.logged_abs_diff, rel=LOGGED_MATCH_RTOL)
        assert step.sample_mean_abs_diff > 0  # bf16 rollout: a real drift, not a trivially equal zero


def test_a_wrong_logged_value_is_named(tmp_path):
    path = hand_run(tmp_path, train_lp=[[-2.0]], rollout_lp=[[-1.0]], mask=[[1]], logged=0.7)
    audit = audit_run(RunDir(path).load())
    assert audit.per_step[0].matches_logged is False
    assert "logged_metric_mismatch" in codes(audit)


def test_missing_rollout_log_probs_is_named_not_zero(tmp_path):
    path = hand_run(tmp_path, train_lp=[[-1.0, -1.0]], rollout_lp=[[-1.0, -1.0]], mask=[[1, 1]], rollout_key="something_else")
    audit = audit_run(RunDir(path).load())
    assert "missing_rollout_log_probs" in codes(audit)
    assert audit.per_step[0].sample_mean_abs_diff is None and audit.rlk_audit_dlogp_abs_mean is None


def test_non_finite_values_are_named_and_propagate_in_the_sample_mean(tmp_path):
    path = hand_run(tmp_path, train_lp=[[float("nan"), -1.0], [-1.0]], rollout_lp=[[-1.0, -1.5], [-1.0]], mask=[[1, 1], [1]])
    audit = audit_run(RunDir(path).load())
    assert "non_finite_dlogp" in codes(audit)
    assert math.isnan(audit.per_step[0].sample_mean_abs_diff)  # as VIME would log it: NaN, not a hidden 0
    assert audit.rlk_audit_dlogp_abs_mean == pytest.approx(0.25)  # token view over the finite tokens only


def test_zero_active_tokens_is_named_and_leaves_no_figures(tmp_path):
    path = hand_run(tmp_path, train_lp=[[-1.0, -2.0]], rollout_lp=[[-1.0, -1.0]], mask=[[0, 0]])
    audit = audit_run(RunDir(path).load())
    assert "zero_active_tokens" in codes(audit)
    assert audit.rlk_audit_active_token_count == 0
    assert audit.rlk_audit_dlogp_abs_mean is None and audit.per_step[0].rlk_audit_dlogp_abs_p99 is None


def test_dump_from_another_run_is_named(tmp_path):
    path = build_run(tmp_path, steps=2)
    # A rollout dump of another run's step 7 copied in under this run's step-1 name.
    rewrite(path / "dumps" / "rollout_1.pt", lambda data: data.update(rollout_id=7))
    audit = audit_run(RunDir(path).load())
    assert "rollout_id_mismatch" in codes(audit)


def test_train_dump_not_matching_the_rollout_dump_is_named(tmp_path):
    path = build_run(tmp_path, steps=1, seed=1)
    other = build_run(tmp_path, steps=1, seed=2)
    (path / "dumps" / "rollout_0.pt").write_bytes((other / "dumps" / "rollout_0.pt").read_bytes())
    audit = audit_run(RunDir(path).load())
    assert "sample_identity_mismatch" in codes(audit)


def test_mismatched_tokenizer_is_named(tmp_path):
    path = build_run(tmp_path, steps=1)

    def other_tokenizer(data):
        for sample in data["samples"]:
            sample["consistency_metadata"]["tokenizer"] = "tok-B"

    rewrite(path / "dumps" / "rollout_0.pt", other_tokenizer)

    def trainer_metadata(data):
        data["rollout_data"]["consistency_metadata"] = [{"tokenizer": "tok-A"} for _ in data["rollout_data"]["tokens"]]

    rewrite(path / "dumps" / "train_0_0.pt", trainer_metadata)
    assert "tokenizer_mismatch" in codes(audit_run(RunDir(path).load()))


def test_token_ids_outside_the_runs_tokenizer_are_named(tmp_path):
    from tokenizers import Tokenizer, models

    from harness.attribution.audit import audit_dumps
    from harness.attribution.run_dumps import read_run_dumps

    path = build_run(tmp_path, steps=1)
    tiny = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))  # 3 ids; the dumps use 64
    audit = audit_dumps("built", read_run_dumps(path / "dumps"), None, tiny)
    assert "tokenizer_mismatch" in codes(audit)


def test_unreadable_and_cp_sliced_dumps_are_named(tmp_path):
    path = build_run(tmp_path, steps=2)
    (path / "dumps" / "train_1_0.pt").write_bytes(b"not a torch file")

    def slice_like_cp(data):
        data["rollout_data"]["log_probs"] = [lp[: len(lp) // 2] for lp in data["rollout_data"]["log_probs"]]

    rewrite(path / "dumps" / "train_0_0.pt", slice_like_cp)
    found = codes(audit_run(RunDir(path).load()))
    assert {"unreadable_dump", "shape_mismatch"} <= found


def test_signed_dlogp_beside_the_absolute_with_a_named_entropy_proxy(tmp_path):
    # dlogp (trainer - rollout): sample 0 [+1, -1, -2, -3], sample 1 [+0.5]; no entropy in the dumps.
    path = hand_run(
        tmp_path,
        train_lp=[[-1.0, -3.0, -5.0, -7.0], [-0.5]],
        rollout_lp=[[-2.0, -2.0, -3.0, -4.0], [-1.0]],
        mask=[[1, 1, 1, 1], [1]],
    )
    audit = audit_run(RunDir(path).load())
    signed = audit.signed
    assert signed["dlogp_mean"] == pytest.approx((1 - 1 - 2 - 3 + 0.5) / 5)
    assert signed["dlogp_abs_mean"] == pytest.approx((1 + 1 + 2 + 3 + 0.5) / 5)
    assert audit.dlogp_mean == pytest.approx(signed["dlogp_mean"]) and audit.per_step[0].dlogp_mean == pytest.approx(-0.9)
    assert signed["entropy_source"].startswith("proxy: rollout log-prob")
    # positions [0, 1, 2, 3, 0] against signed dlogp [1, -1, -2, -3, 0.5]: ranks fall with position.
    assert signed["correlations"]["signed_dlogp_vs_position"]["spearman_rho"] == pytest.approx(-0.9746794344808963)
    # rollout log-probs [-2, -2, -3, -4, -1] rise with the signed dlogp
    assert signed["correlations"]["signed_dlogp_vs_rollout_log_prob"]["spearman_rho"] > 0.8
    assert "signed_dlogp_vs_entropy" not in signed["correlations"]


def test_signed_dlogp_uses_the_dumped_entropy_when_there(tmp_path):
    path = hand_run(tmp_path, train_lp=[[-1.0, -3.0, -5.0, -7.0]], rollout_lp=[[-2.0, -2.0, -3.0, -4.0]], mask=[[1, 1, 1, 1]])

    def add_entropy(data):
        data["rollout_data"]["entropy"] = [torch.tensor([0.1, 0.5, 0.9, 1.3])]

    rewrite(path / "dumps" / "train_0_0.pt", add_entropy)
    signed = audit_run(RunDir(path).load()).signed
    assert signed["entropy_source"].startswith("train dump entropy")
    # signed dlogp [1, -1, -2, -3] falls as entropy rises: rho -1 exactly
    assert signed["correlations"]["signed_dlogp_vs_entropy"]["spearman_rho"] == pytest.approx(-1.0)
    assert signed["correlations"]["abs_dlogp_vs_entropy"]["spearman_rho"] == pytest.approx(3 / math.sqrt(10))  # ties in |dlogp| [1, 1, 2, 3]
