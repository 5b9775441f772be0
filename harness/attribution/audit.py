"""The token-level dlogp audit of a run: dlogp = trainer log-prob - rollout log-prob on loss-mask tokens.

Two views, named apart (docs/attribution.md):
* token-weighted (`rlk_audit_*`, the names RL-Align's audit uses for the same figures): every active
  token of a step counts once - mean/max/p50/p90/p99 of |dlogp|, ratio0 = exp(dlogp), clipfrac0,
  approx_kl0 = ratio0 - 1 - dlogp, active_token_count, mask_coverage; beside them the signed mean
  `dlogp_mean` and, over the run, `signed` (harness.attribution.signed_dlogp: signed and absolute
  dlogp against entropy, or the rollout log-prob as its proxy, and response position);
* sample-mean (`sample_mean_abs_diff`): VIME's own reduction of the logged
  `train/train_rollout_logprob_abs_diff` (harness.layout.sample_mean), compared with the logged value;
* other frameworks' gates on the same tokens (harness.attribution.gate_metrics): verl's
  rollout-correction set (`verl_*`) and NeMo-RL's `nemo_rl_gen_kl_error`, `nemo_rl_token_mult_prob_error`,
  per step and over the run (`gate_metrics`).

Bad input never becomes a silent zero: each problem is a warning with RL-Align's code where it has
one (missing_rollout_log_probs, zero_active_tokens, non_finite_dlogp, shape_mismatch, ...).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from harness.attribution.consistency import compare_run, tokenizer_checks
from harness.attribution.gate_metrics import gate_metrics
from harness.attribution.probe_context import correlations, worst_tokens
from harness.attribution.run_dumps import RunDumps, SamplePair, read_run_dumps
from harness.attribution.signed_dlogp import signed_view
from harness.layout.sample_mean import sample_mean_abs_diff
from harness.records.metric_names import ABS_DIFF

# The trainer reduces fp32 log-probs in fp32; this audit re-reduces the same fp32 values in fp64.
# The two agree to a few fp32 ulps of the result: relative 1e-5 covers the sums of a few thousand
# tokens (n * 2**-24 ~ 1e-4 is the worst case, typical error is sqrt(n) * 2**-24), absolute 1e-8
# covers results near zero (the fp32 floor run).
LOGGED_MATCH_RTOL = 1e-5
LOGGED_MATCH_ATOL = 1e-8
EPS_CLIP = 0.2  # RL-Align's audit default for clipfrac0 (PPO's clip range)


class StepAudit(BaseModel):
    rollout_id: int
    samples: int
    rlk_audit_active_token_count: int
    rlk_audit_mask_coverage: float | None = None
    dlogp_mean: float | None = None  # signed: trainer minus rollout
    rlk_audit_dlogp_abs_mean: float | None = None
    rlk_audit_dlogp_abs_max: float | None = None
    rlk_audit_dlogp_abs_p50: float | None = None
    rlk_audit_dlogp_abs_p90: float | None = None
    rlk_audit_dlogp_abs_p99: float | None = None
    rlk_audit_ratio0_mean: float | None = None
    rlk_audit_clipfrac0: float | None = None
    rlk_audit_approx_kl0: float | None = None
    rlk_audit_zero_active_sample_count: int = 0
    sample_mean_abs_diff: float | None = None
    logged_abs_diff: float | None = None
    matches_logged: bool | None = None
    # Other frameworks' gates on the same tokens (harness.attribution.gate_metrics).
    verl_kl: float | None = None
    verl_k3_kl: float | None = None
    verl_chi2_token: float | None = None
    verl_chi2_seq: float | None = None
    verl_log_ppl_diff: float | None = None
    verl_log_ppl_abs_diff: float | None = None
    verl_probs_pearson_corr: float | None = None
    nemo_rl_token_mult_prob_error: float | None = None
    nemo_rl_gen_kl_error: float | None = None


class Audit(BaseModel):
    run: str
    per_step: list[StepAudit] = Field(default_factory=list)
    # Token-weighted over every step of the run.
    rlk_audit_active_token_count: int = 0
    dlogp_mean: float | None = None  # signed: trainer minus rollout
    rlk_audit_dlogp_abs_mean: float | None = None
    rlk_audit_dlogp_abs_max: float | None = None
    rlk_audit_dlogp_abs_p50: float | None = None
    rlk_audit_dlogp_abs_p90: float | None = None
    rlk_audit_dlogp_abs_p99: float | None = None
    rlk_audit_ratio0_mean: float | None = None
    rlk_audit_clipfrac0: float | None = None
    rlk_audit_approx_kl0: float | None = None
    worst_tokens: list[dict] = Field(default_factory=list)
    correlations: dict[str, dict] = Field(default_factory=dict)
    signed: dict = Field(default_factory=dict)
    # verl's and NeMo-RL's mismatch gates over every step's tokens (harness.attribution.gate_metrics).
    gate_metrics: dict = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def table(self) -> list[dict]:
        """The per-step table as plain rows (for printing, CSV or Allure)."""
        return [step.model_dump() for step in self.per_step]


class TokenRows:
    """Active tokens of a run, one entry per token, with what the context view needs."""

    def __init__(self) -> None:
        self.dlogp: list[np.ndarray] = []
        self.where: list[tuple[SamplePair, np.ndarray]] = []  # (pair, response positions)
        self.pairs: list[tuple[np.ndarray, np.ndarray]] = []  # per sample (trainer, rollout) on its active tokens


def _token_stats(dlogp: np.ndarray) -> dict:
    if dlogp.size == 0:
        return {}
    abs_d = np.abs(dlogp)
    ratio = np.exp(dlogp)
    p50, p90, p99 = np.quantile(abs_d, [0.5, 0.9, 0.99])  # linear interpolation, as torch.quantile
    return {
        "dlogp_mean": float(dlogp.mean()),
        "rlk_audit_dlogp_abs_mean": float(abs_d.mean()),
        "rlk_audit_dlogp_abs_max": float(abs_d.max()),
        "rlk_audit_dlogp_abs_p50": float(p50),
        "rlk_audit_dlogp_abs_p90": float(p90),
        "rlk_audit_dlogp_abs_p99": float(p99),
        "rlk_audit_ratio0_mean": float(ratio.mean()),
        "rlk_audit_clipfrac0": float((np.abs(ratio - 1.0) > EPS_CLIP).mean()),
        "rlk_audit_approx_kl0": float((ratio - 1.0 - dlogp).mean()),
    }


def _from_either(pair: SamplePair, key: str):
    """A per-sample field from the train dump, else from the rollout dump."""
    value = pair.train.get(key)
    if value is None and pair.rollout is not None:
        value = pair.rollout.get(key)
    return value


def _sample_arrays(pair: SamplePair, warnings: list[str]):
    """(trainer lp, rollout lp, mask) the trainer compared, or None with a warning saying why."""
    label = f"rollout {pair.rollout_id} sample {pair.position}"
    train = pair.train
    if train is None or not train.has("log_probs"):
        warnings.append(f"{label}: no trainer log-probs (key 'log_probs' of a train dump) (code: missing_train_log_probs)")
        return None
    rollout_lp = _from_either(pair, "rollout_log_probs")
    if rollout_lp is None:
        warnings.append(f"{label}: no rollout log-probs (key 'rollout_log_probs') (code: missing_rollout_log_probs)")
        return None
    mask = _from_either(pair, "loss_mask")
    if mask is None:
        warnings.append(f"{label}: no loss mask (key 'loss_masks') (code: missing_loss_mask)")
        return None
    train_lp = train.get("log_probs")
    if not (train_lp.size == rollout_lp.size == mask.size):
        warnings.append(
            f"{label}: train_log_probs={train_lp.size}, rollout_log_probs={rollout_lp.size}, "
            f"loss_masks={mask.size} (CP-sliced dump?) (code: shape_mismatch)"
        )
        return None
    return train_lp, rollout_lp, mask


def _logged_by_step(run) -> dict[int, float]:
    return {int(n): float(v) for n, v in run.series(ABS_DIFF)} if run is not None else {}


def audit_step(rollout_id: int, pairs: list[SamplePair], logged: float | None, tokens: TokenRows, warnings: list[str]) -> StepAudit:
    step_d, diffs, masks, step_pairs = [], [], [], []
    total = zero_active = 0
    for pair in pairs:
        arrays = _sample_arrays(pair, warnings)
        if arrays is None:
            continue
        train_lp, rollout_lp, mask = arrays
        diffs.append(np.abs(train_lp - rollout_lp))
        masks.append(mask)
        total += mask.size
        active = np.nonzero(mask > 0)[0]
        if active.size == 0:
            zero_active += 1
            warnings.append(f"rollout {rollout_id} sample {pair.position}: no active response tokens (code: zero_active_tokens)")
            continue
        d = (train_lp - rollout_lp)[active]
        finite = np.isfinite(d)
        if not finite.all():
            warnings.append(
                f"rollout {rollout_id} sample {pair.position}: {int((~finite).sum())} non-finite active "
                "dlogp values, left out of the token view (code: non_finite_dlogp)"
            )
            d, active = d[finite], active[finite]
        step_pairs.append((train_lp[active], rollout_lp[active]))
        step_d.append(d)
        tokens.dlogp.append(d)
        tokens.where.append((pair, active))
        tokens.pairs.append(step_pairs[-1])
    dlogp = np.concatenate(step_d) if step_d else np.zeros(0)
    sample_mean = None
    if diffs:
        sample_mean = sample_mean_abs_diff([_t(x) for x in diffs], [_t(m) for m in masks])
        if not np.isfinite(sample_mean):
            warnings.append(
                f"rollout {rollout_id}: the sample-mean abs diff is {sample_mean} (non-finite inputs propagate, as in VIME) (code: non_finite_dlogp)"
            )
    elif pairs:
        warnings.append(f"rollout {rollout_id}: no sample has both log-probs; no audit for this step (code: no_comparable_samples)")
    active_count = int(dlogp.size)
    matches = None
    if logged is not None and sample_mean is not None:
        matches = bool(np.isclose(sample_mean, logged, rtol=LOGGED_MATCH_RTOL, atol=LOGGED_MATCH_ATOL))
        if not matches:
            warnings.append(
                f"rollout {rollout_id}: audit sample-mean {sample_mean:.9g} differs from the logged "
                f"{ABS_DIFF} {logged:.9g} (code: logged_metric_mismatch)"
            )
    return StepAudit(
        rollout_id=rollout_id,
        samples=len(diffs),
        rlk_audit_active_token_count=active_count,
        rlk_audit_mask_coverage=(active_count / total) if total else None,
        rlk_audit_zero_active_sample_count=zero_active,
        sample_mean_abs_diff=sample_mean,
        logged_abs_diff=logged,
        matches_logged=matches,
        **_token_stats(dlogp),
        **(gate_metrics(step_pairs) if step_pairs else {}),
    )


def _t(array: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def identity_warnings(dumps: RunDumps) -> list[str]:
    """One line when the train dumps describe other samples than the rollout dumps (another run or step)."""
    mismatches = compare_run(dumps).group("identity")
    if not mismatches:
        return []
    fields = ", ".join(sorted({m.field for m in mismatches}))
    samples = len({(m.rollout_id, m.sample) for m in mismatches})
    return [
        f"{samples} samples differ between the rollout and train dumps in {fields}, e.g. {mismatches[0].line()}; "
        "dumps from another run or step, or a framework fault (see probe 1) (code: sample_identity_mismatch)"
    ]


def audit_dumps(name: str, dumps: RunDumps, run=None, tokenizer=None, model_vocab: int | None = None) -> Audit:
    warnings = list(dumps.warnings)
    logged = _logged_by_step(run)
    tokens = TokenRows()
    per_step = [audit_step(rid, step.pairs, logged.get(rid), tokens, warnings) for rid, step in sorted(dumps.steps.items())]
    if not dumps.steps:
        warnings.append(f"{name}: no rollout/train dumps to audit (code: dumps_missing)")
    if run is not None and not logged:
        warnings.append(f"{name}: {ABS_DIFF} was never logged; the sample-mean cannot be checked (code: logged_metric_missing)")
    warnings.extend(tokenizer_checks(dumps, tokenizer, model_vocab))
    warnings.extend(identity_warnings(dumps))
    dlogp = np.concatenate(tokens.dlogp) if tokens.dlogp else np.zeros(0)
    if dumps.steps and dlogp.size == 0:
        warnings.append(f"{name}: zero active tokens with both log-probs in the whole run (code: zero_active_tokens)")
    audit = Audit(
        run=name,
        per_step=per_step,
        rlk_audit_active_token_count=int(dlogp.size),
        worst_tokens=worst_tokens(tokens, tokenizer),
        correlations=correlations(tokens),
        signed=signed_view(tokens),
        gate_metrics=gate_metrics(tokens.pairs) if tokens.pairs else {},
        warnings=warnings,
        **_token_stats(dlogp),
    )
    return audit


def audit_run(run) -> Audit:
    """Audit a loaded run: its dumps, checked against its logged abs-diff."""
    from harness.attribution.probe_run import load_tokenizer, model_vocab_size

    tokenizer, problem = load_tokenizer(run)
    steps_per_rollout = int(run.spec.flag("num-steps-per-rollout", 1))
    compare_with = run if steps_per_rollout == 1 else None
    audit = audit_dumps(run.id, read_run_dumps(run.path / "dumps"), compare_with, tokenizer, model_vocab_size(run))
    if steps_per_rollout > 1:
        audit.warnings.append(
            f"{run.id}: --num-steps-per-rollout {steps_per_rollout}: each logged step covers part of a "
            "rollout, so the per-rollout sample-mean is not compared with it (code: steps_per_rollout)"
        )
    if problem:
        audit.warnings.append(problem)
    return audit
