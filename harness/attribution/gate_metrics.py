"""The mismatch figures other RL frameworks gate on, from the same tokens as VIME's abs-diff.

Every figure takes, per sample, the trainer's and the rollout's log-probs of the sampled tokens on
the loss mask (the pairs the audit reads, harness.attribution.audit), so a run can be read
against any framework's gate beside slime/VIME's `train/train_rollout_logprob_abs_diff`. With
d = trainer log-prob - rollout log-prob per token:

verl's rollout-correction diagnostics (verl/trainer/ppo/rollout_corr_helper.py,
`compute_offpolicy_metrics`; the Pearson figure from verl/utils/debug/metrics.py,
`calculate_debug_metrics`), token means over every active token of the batch unless said:

    verl_kl                   mean(-d)                               rollout_corr/kl (k1, KL(rollout || trainer))
    verl_k3_kl                mean(exp(d) - d - 1)                   rollout_corr/k3_kl
    verl_chi2_token           mean(exp(2 clamp(d, +-20))) - 1        rollout_corr/chi2_token
    verl_chi2_seq             mean over samples of exp(2 clamp(sum_t d, +-20)) - 1      rollout_corr/chi2_seq
    verl_log_ppl_diff         mean over samples of (mean_t rollout - mean_t trainer)    rollout_corr/log_ppl_diff
    verl_log_ppl_abs_diff     mean over samples of |that|            rollout_corr/log_ppl_abs_diff
    verl_probs_pearson_corr   Pearson r of exp(trainer), exp(rollout) over the tokens   training/rollout_actor_probs_pearson_corr

NeMo-RL's (nemo_rl/algorithms/loss_functions.py, ClippedPGLossFn; calculate_kl in
nemo_rl/algorithms/utils.py, with its default kl_type k3 and no clamps):

    nemo_rl_token_mult_prob_error   mean(exp(|d|))                 train/token_mult_prob_error
    nemo_rl_gen_kl_error            mean(exp(d) - 1 - d)           train/gen_kl_error (KL(gen || train), k3)

gen_kl_error and verl's k3_kl are the same estimator of the same direction (and the audit's
rlk_audit_approx_kl0); each keeps its own name so a reader finds the figure their gate uses.
Pure functions of arrays: no run, no file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# verl clamps the log-ratio to +-SAFETY_BOUND (20.0) before exponentiating in its chi-square figures.
VERL_SAFETY_BOUND = 20.0
FIELDS = (
    "verl_kl",
    "verl_k3_kl",
    "verl_chi2_token",
    "verl_chi2_seq",
    "verl_log_ppl_diff",
    "verl_log_ppl_abs_diff",
    "verl_probs_pearson_corr",
    "nemo_rl_token_mult_prob_error",
    "nemo_rl_gen_kl_error",
)


def gate_metrics(samples: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, float | None]:
    """Each figure of FIELDS over ``samples``: per sample (trainer log-probs, rollout log-probs) on
    its active (loss-mask) tokens, in fp64. A sample without tokens is left out (it has no mean).
    No token at all: every figure None. A figure that cannot be formed (Pearson on fewer than two
    tokens or a constant probability) is NaN, never a number it is not."""
    pairs = [(np.asarray(t, dtype=np.float64), np.asarray(r, dtype=np.float64)) for t, r in samples]
    pairs = [(t, r) for t, r in pairs if t.size]
    if not pairs:
        return dict.fromkeys(FIELDS)
    trainer = np.concatenate([t for t, _ in pairs])
    rollout = np.concatenate([r for _, r in pairs])
    d = trainer - rollout
    clamped = np.clip(d, -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
    seq_sums = np.clip(np.array([float((t - r).sum()) for t, r in pairs]), -VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
    log_ppl_diff = np.array([float(r.mean() - t.mean()) for t, r in pairs])
    k3 = float(np.mean(np.exp(d) - d - 1.0))
    return {
        "verl_kl": float(np.mean(-d)),
        "verl_k3_kl": k3,
        "verl_chi2_token": float(np.mean(np.exp(2.0 * clamped)) - 1.0),
        "verl_chi2_seq": float(np.mean(np.exp(2.0 * seq_sums)) - 1.0),
        "verl_log_ppl_diff": float(log_ppl_diff.mean()),
        "verl_log_ppl_abs_diff": float(np.abs(log_ppl_diff).mean()),
        "verl_probs_pearson_corr": pearson(np.exp(trainer), np.exp(rollout)),
        "nemo_rl_token_mult_prob_error": float(np.mean(np.exp(np.abs(d)))),
        "nemo_rl_gen_kl_error": k3,
    }


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r (scipy), NaN where it is undefined (fewer than two values, a constant side)."""
    from scipy.stats import pearsonr

    if x.size < 2 or np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        return math.nan
    return float(pearsonr(x, y)[0])
