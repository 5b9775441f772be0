"""Probe 6: the sampling contract - temperature, top-k/top-p retained sets, processed vs raw log-probs.

On a probe bundle's fixed tokens, each candidate contract is computed exactly (fp64, vLLM's own
top-k/top-p filter through harness.operators.impl_reference): raw log-softmax at T=1, at the rollout
temperature, and the processed (renormalised over the kept set) one. Each side's recorded log-probs
are matched to the contract they are closest to. The probe fails (semantic drift) when the trainer
follows a different contract than the rollout AND replaying the rollout's contract on the trainer's
side removes at least thresholds.semantic_replay_min_removed_fraction of the observed drift.
It also checks that every sampled token lies inside the declared top-k/top-p set, and compares
that with the rollout dump's own in_top_k / in_top_p flags where present.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.attribution.probe_bundle import ProbeBundle


def _contracts(hidden, weight, targets, temperature: float, top_k: int | None, top_p: float | None) -> dict:
    from harness.operators.impl_reference import reference_logprobs

    out = {"raw T=1": reference_logprobs(hidden, weight, targets, 1.0)}
    if temperature != 1.0:
        out[f"raw T={temperature:g}"] = reference_logprobs(hidden, weight, targets, temperature)
    if top_k is not None or top_p is not None:
        name = f"processed T={temperature:g}" + (f" top_k={top_k}" if top_k else "") + (f" top_p={top_p:g}" if top_p else "")
        out[name] = reference_logprobs(hidden, weight, targets, temperature, top_k, top_p)
    return out


def declared_rollout_contract(temperature: float, filters: bool, mode: str, top_k, top_p) -> str:
    if "processed" in mode:
        if filters:
            return f"processed T={temperature:g}" + (f" top_k={top_k}" if top_k else "") + (f" top_p={top_p:g}" if top_p else "")
        return "raw T=1" if temperature == 1.0 else f"raw T={temperature:g}"
    return "raw T=1"  # vLLM's raw_logprobs are taken before temperature and filters


def _closest(contracts: dict, recorded: torch.Tensor) -> tuple[str, dict]:
    finite = {}
    for name, values in contracts.items():
        diff = (values - recorded).abs()
        finite[name] = float(diff[torch.isfinite(diff)].mean()) if torch.isfinite(diff).any() else float("inf")
    return min(finite, key=finite.get), finite


def probe_contract(bundle: ProbeBundle, settings, floor: float, min_removed: float) -> dict:
    active = bundle.active
    hidden, targets = bundle.hidden[active], bundle.targets[active]
    temperature = float(bundle.scalar("temperature", settings.temperature))
    top_p = float(bundle.scalar("top_p", settings.top_p))
    top_k = int(bundle.scalar("top_k", settings.top_k))
    mode = str(bundle.scalar("logprobs_mode", settings.logprobs_mode))
    k = top_k if top_k > 0 else None
    p = top_p if top_p < 1.0 else None
    contracts = _contracts(hidden, bundle.weight, targets, temperature, k, p)
    declared = declared_rollout_contract(temperature, k is not None or p is not None, mode, k, p)
    evidence: dict = {
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "logprobs_mode": mode,
        "declared_rollout_contract": declared,
        "tokens": int(targets.numel()),
    }
    if k is not None or p is not None:
        kept = torch.isfinite(contracts[declared]) if declared in contracts else None
        if kept is not None:
            evidence["sampled_tokens_outside_declared_set"] = int((~kept).sum())
    if bundle.rollout_log_probs is None or bundle.trainer_log_probs is None:
        return {"failed": False, "skipped": "the bundle lacks rollout or trainer log-probs", "evidence": evidence}
    rollout_lp, trainer_lp = bundle.rollout_log_probs[active], bundle.trainer_log_probs[active]
    trainer_contract, trainer_fit = _closest(contracts, trainer_lp)
    rollout_contract, rollout_fit = _closest(contracts, rollout_lp)
    observed = float((trainer_lp - rollout_lp).abs().mean())
    replayed = rollout_fit.get(declared)
    gap = contracts[trainer_contract] - contracts.get(declared, contracts[rollout_contract])
    gap_mean = float(gap[torch.isfinite(gap)].abs().mean()) if torch.isfinite(gap).any() else float("inf")
    removed = None if not observed or replayed is None else 1.0 - replayed / observed
    evidence.update(
        {
            "trainer_contract_fit": trainer_fit,
            "rollout_contract_fit": rollout_fit,
            "trainer_follows": trainer_contract,
            "rollout_follows": rollout_contract,
            "contract_gap_mean": gap_mean,
            "observed_mean_abs_dlogp": observed,
            "replayed_mean_abs_dlogp": replayed,
            "removed_fraction": removed,
            "min_removed_fraction": min_removed,
            "floor": floor,
        }
    )
    differs = gap_mean > floor and trainer_contract != declared
    failed = bool(differs and observed > floor and removed is not None and removed >= min_removed)
    evidence["contract_differs"] = differs
    # The two sides follow the same contract on these tokens: the trainer's and the rollout's log-probs
    # are closest to the declared one, or the candidate contracts coincide here (gap within the floor).
    evidence["contract_agrees"] = bool(gap_mean <= floor or trainer_contract == rollout_contract == declared)
    # A NaN or inf anywhere in what the verdict rests on: not comparable, never an agreement.
    figures = [observed, gap_mean, *trainer_fit.values(), *rollout_fit.values()]
    evidence["comparable"] = all(math.isfinite(v) for v in figures)
    return {
        "failed": failed,
        "evidence": evidence,
        "verdict": (
            f"trainer follows '{trainer_contract}' but the rollout's declared contract is '{declared}'; "
            f"recomputing under it removes {removed:.0%} of this bundle's drift"
            if failed
            else None
        ),
    }


def flag_membership(dumps, settings) -> dict:
    """From the dumps alone: sampled tokens flagged as outside the top-k/top-p set (by the rollout's
    own flags, or by the trainer's recomputed membership)."""
    counts = {"rollout": [0, 0], "train": [0, 0]}  # side -> [tokens flagged, tokens outside]
    signs = [0, 0]  # active tokens with both log-probs, of which trainer < rollout
    for step in dumps.steps.values():
        for pair in step.pairs:
            mask = next((s.get("loss_mask") for s in (pair.train, pair.rollout) if s is not None and s.has("loss_mask")), None)
            trainer = pair.train.get("log_probs") if pair.train is not None else None
            rollout = next((s.get("rollout_log_probs") for s in (pair.train, pair.rollout) if s is not None and s.has("rollout_log_probs")), None)
            if mask is not None and trainer is not None and rollout is not None and trainer.size == rollout.size == mask.size:
                active = (mask > 0) & np.isfinite(trainer) & np.isfinite(rollout)
                signs[0] += int(active.sum())
                signs[1] += int(((trainer < rollout) & active).sum())
            for side, name in (("rollout", "in_top_k"), ("rollout", "in_top_p"), ("train", "in_filter")):
                holder = getattr(pair, side)
                value = holder.get(name) if holder is not None else None
                if value is None or mask is None or value.size != mask.size:
                    continue
                counts[side][0] += int((mask > 0).sum())
                counts[side][1] += int(((value == 0) & (mask > 0)).sum())
    # Only the rollout's own flags say its filter did not apply to sampling; the trainer's recomputed
    # membership differs from it at the set's edge whenever the two sides' logits differ (evidence only).
    return {
        "tokens_with_filter_flags": counts["rollout"][0],
        "sampled_outside_flagged_set": counts["rollout"][1],
        "trainer_view_tokens": counts["train"][0],
        "trainer_view_outside_set": counts["train"][1],
        # The sign of dlogp (trainer - rollout): one-sided below zero is the processed-vs-raw contract gap.
        "dlogp_tokens": signs[0],
        "dlogp_negative_fraction": signs[1] / signs[0] if signs[0] else None,
    }


class ReplayRunProblem(ValueError):
    """A run given as the replay run that is not the judged run's spec with the replay switched on."""


def measured_replay(run, replay, flag: str, warmup: int) -> dict:
    """What replaying the rollout's processed contract in the trainer removed, measured: `replay` is a
    run of the judged run's own spec with `flag` on (the ladder's processed-replay run of the rung,
    harness.experiment.evidence), and the share is 1 - its logged abs-diff / the run's, over the
    steps both logged after `warmup` (the ladder's series, harness.judge.ladder.abs_diff_after_warmup).
    Raises ReplayRunProblem (one line) when `replay` is not that run."""
    from harness.judge.verdict import after_warmup
    from harness.records.metric_names import ABS_DIFF
    from harness.spec.flag_read import is_on

    mine, theirs = dict(run.spec.flags), dict(replay.spec.flags)
    if is_on(mine, flag):
        raise ReplayRunProblem(f"{run.path}: the judged run already has {flag} on; it has no replay run")
    if not is_on(theirs, flag):
        raise ReplayRunProblem(f"{replay.path}/spec.yaml: key flags.{flag}: expected true (a replay run of {run.id}), found {theirs.get(flag)!r}")
    differ = sorted(k for k in set(mine) | set(theirs) if k != flag and mine.get(k) != theirs.get(k))
    if differ:
        name = differ[0]
        raise ReplayRunProblem(
            f"{replay.path}/spec.yaml: key flags.{name}: expected {mine.get(name)!r} as in {run.id} (a replay run changes only {flag}), "
            f"found {theirs.get(name)!r}" + (f" ({len(differ) - 1} more flags differ)" if len(differ) > 1 else "")
        )
    drift = dict(zip(*after_warmup(run.series(ABS_DIFF), warmup)))
    replayed = dict(zip(*after_warmup(replay.series(ABS_DIFF), warmup)))
    steps = sorted(set(drift) & set(replayed))
    evidence = {"run": replay.id, "metric": ABS_DIFF, "warmup_steps": warmup, "steps": len(steps)}
    if not steps:
        return {**evidence, "removed_fraction": None, "why": f"no step after warmup {warmup} logged {ABS_DIFF} in both runs"}
    run_mean = sum(drift[s] for s in steps) / len(steps)
    replay_mean = sum(replayed[s] for s in steps) / len(steps)
    removed = 1.0 - replay_mean / run_mean if run_mean > 0 else None
    return {**evidence, "run_mean": run_mean, "replay_mean": replay_mean, "removed_fraction": removed}
