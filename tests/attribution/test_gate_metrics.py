"""verl's and NeMo-RL's mismatch gates (harness.attribution.gate_metrics) against values computed
by hand, and in the audit beside the abs-diff on the same tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.attribution.gate_metrics import FIELDS, gate_metrics

pytestmark = pytest.mark.attribution

LN2 = math.log(2.0)
# Sample A: trainer p = (1/2, 1/2), rollout p = (1/4, 1/2): d = trainer - rollout = (ln 2, 0).
# Sample B: trainer p = 1/4, rollout p = 1/2: d = -ln 2.
SAMPLES = [
    (np.log([0.5, 0.5]), np.log([0.25, 0.5])),
    (np.log([0.25]), np.log([0.5])),
]


def test_each_figure_equals_its_hand_computed_value():
    m = gate_metrics(SAMPLES)
    # k1 = mean(-d) = -(ln2 + 0 - ln2) / 3
    assert m["verl_kl"] == pytest.approx(0.0, abs=1e-15)
    # k3 = mean(e^d - d - 1): (2 - ln2 - 1) + 0 + (1/2 + ln2 - 1) = 1/2 over 3 tokens
    assert m["verl_k3_kl"] == pytest.approx(1 / 6)
    assert m["nemo_rl_gen_kl_error"] == pytest.approx(1 / 6)  # NeMo-RL's k3 of the same direction
    # chi2_token = mean(e^{2d}) - 1 = (4 + 1 + 1/4) / 3 - 1
    assert m["verl_chi2_token"] == pytest.approx(0.75)
    # chi2_seq: sum of d per sample ln2 and -ln2 -> (4 + 1/4) / 2 - 1
    assert m["verl_chi2_seq"] == pytest.approx(1.125)
    # log_ppl_diff per sample = mean rollout - mean trainer: A -ln2/2, B +ln2 -> mean ln2/4, |.| 3 ln2/4
    assert m["verl_log_ppl_diff"] == pytest.approx(LN2 / 4)
    assert m["verl_log_ppl_abs_diff"] == pytest.approx(3 * LN2 / 4)
    # token_mult_prob_error = mean(e^{|d|}) = (2 + 1 + 2) / 3
    assert m["nemo_rl_token_mult_prob_error"] == pytest.approx(5 / 3)
    # probabilities trainer (1/2, 1/2, 1/4), rollout (1/4, 1/2, 1/2): both means 5/12;
    # deviations (1/12, 1/12, -1/6) and (-1/6, 1/12, 1/12): covariance -1/48 over variance 1/24
    assert m["verl_probs_pearson_corr"] == pytest.approx(-0.5)


def test_verl_clamps_the_log_ratio_in_its_chi_square_figures():
    m = gate_metrics([(np.array([0.0]), np.array([-30.0]))])  # d = 30 beyond verl's bound of 20
    assert m["verl_chi2_token"] == pytest.approx(math.exp(40.0) - 1.0)
    assert m["verl_chi2_seq"] == pytest.approx(math.exp(40.0) - 1.0)
    assert m["nemo_rl_token_mult_prob_error"] == pytest.approx(math.exp(30.0))  # NeMo-RL: no clamp


def test_no_tokens_is_none_and_an_undefined_correlation_is_nan():
    assert gate_metrics([]) == dict.fromkeys(FIELDS)
    assert gate_metrics([(np.zeros(0), np.zeros(0))]) == dict.fromkeys(FIELDS)
    one = gate_metrics([(np.log([0.5]), np.log([0.25]))])
    assert math.isnan(one["verl_probs_pearson_corr"]) and one["verl_k3_kl"] == pytest.approx(1 - LN2)
    # aligned sides: every divergence zero, correlation one
    same = gate_metrics([(np.log([0.5, 0.25]), np.log([0.5, 0.25]))])
    assert same["verl_k3_kl"] == 0.0 and same["verl_chi2_token"] == 0.0 and same["nemo_rl_token_mult_prob_error"] == 1.0
    assert same["verl_probs_pearson_corr"] == pytest.approx(1.0)


def test_the_audit_reports_them_on_the_tokens_of_its_abs_diff(tmp_path):
    import torch
    from attribution_builders import build_run

    from harness.attribution.audit import audit_run
    from harness.records.rundir import RunDir

    audit = audit_run(RunDir(build_run(tmp_path, steps=1, rollout_dtype=torch.bfloat16)).load())
    step = audit.per_step[0]
    # the same active tokens: k1 is minus the signed mean dlogp the audit reports
    assert step.verl_kl == pytest.approx(-step.dlogp_mean)
    assert step.nemo_rl_gen_kl_error == pytest.approx(step.rlk_audit_approx_kl0)
    assert step.nemo_rl_token_mult_prob_error >= 1.0 and 0.0 < step.verl_probs_pearson_corr <= 1.0
    assert set(FIELDS) <= set(audit.gate_metrics) and audit.gate_metrics["verl_k3_kl"] == pytest.approx(step.verl_k3_kl)
