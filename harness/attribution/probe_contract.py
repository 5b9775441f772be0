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
    from harness.records.metric_names import ABS_DIFF
    from harness.records.series_window import after_warmup
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


# ---------------------------------------------------------------- one candidate contract: the temperature, measured
# Where the declared sampling leaves one candidate contract (T = 1, no top-k/top-p), "both sides follow
# the same contract" cannot fail by matching contracts: there is nothing else to match. What each side
# did can still be measured: the temperature T_hat that best explains its recorded log-probs from the
# logits it computed them from (a 1-D least-squares fit), with an interval. A side that divided its
# logits by another T (or none where one was due) moves T_hat off the declared T.

N_RESAMPLES = 2000  # bootstrap resamples of the samples (as harness.judge.stats and paired.py use)


def _selected(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    scaled = logits / temperature
    return scaled.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(scaled, dim=1)


def fit_temperature(
    samples: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    declared: float,
    confidence: float,
    seed: int = 0,
    counts: np.ndarray | None = None,
) -> dict:
    """T_hat for one side: the temperature minimising sum_i (log_softmax(z_i / T)[y_i] - recorded_i)^2
    over every finite token of `samples` ((logits [R, V], targets [R], recorded [R]) per sample; the
    logits in fp64), by scipy's bounded scalar minimiser on [declared / 2, 2 x declared].

    The interval: a bootstrap over samples, not tokens, because the tokens of one sequence share its
    hidden states and so their errors (a profile interval would treat them as independent and come out
    too narrow). Each resample's T is one Newton step from T_hat on the per-sample gradient and
    curvature sums (the linearised bootstrap: exact to second order in the resample's shift, which is
    orders of magnitude below the interval's width here, and 2000 refits cost one fit).

    `sensitivity`: mean |d log p / dT| at the declared T over the same tokens: a temperature error d
    moves the mean |dlogp| by about d x sensitivity. `counts`: the resamples as per-sample counts
    [resamples, samples] (default: N_RESAMPLES drawn with `seed`); their T's are returned as `resampled`."""
    from scipy.optimize import minimize_scalar

    kept = []
    for logits, targets, recorded in samples:
        finite = torch.isfinite(recorded) & torch.isfinite(logits).all(dim=1)
        if bool(finite.any()):
            kept.append((logits[finite].double(), targets[finite].long(), recorded[finite].double()))
    tokens = sum(int(t.numel()) for _, t, _ in kept)
    out = {"declared": declared, "samples": len(kept), "tokens": tokens, "t_hat": None, "interval": None, "confidence": confidence}
    if len(kept) < 2:
        return {**out, "why": f"{len(kept)} sample(s) with finite logits and log-probs: a bootstrap over samples needs two or more"}
    z = torch.cat([k[0] for k in kept])
    y = torch.cat([k[1] for k in kept])
    obs = torch.cat([k[2] for k in kept])
    sample_of = np.concatenate([np.full(k[1].numel(), i) for i, k in enumerate(kept)])
    fit = minimize_scalar(
        lambda t: float(((_selected(z, y, t) - obs) ** 2).sum()), bounds=(declared / 2, 2 * declared), method="bounded", options={"xatol": 1e-12}
    )
    t_hat = float(fit.x)

    def slopes(t: float) -> tuple[torch.Tensor, torch.Tensor]:
        """d log p / dT and d^2 log p / dT^2 at t (log p = z_y / T - logsumexp(z / T))."""
        p = torch.softmax(z / t, dim=1)
        mean = (p * z).sum(1)
        var = (p * z * z).sum(1) - mean**2
        centred = z.gather(1, y[:, None]).squeeze(1) - mean
        return -centred / t**2, -var / t**4 + 2 * centred / t**3

    g, h = slopes(t_hat)
    r = _selected(z, y, t_hat) - obs
    grad = np.bincount(sample_of, (r * g).numpy(), minlength=len(kept))
    curv = np.bincount(sample_of, (g * g + r * h).numpy(), minlength=len(kept))
    if counts is None:
        rng = np.random.default_rng(seed)
        counts = np.stack([np.bincount(rng.integers(0, len(kept), len(kept)), minlength=len(kept)) for _ in range(N_RESAMPLES)])
    with np.errstate(divide="ignore", invalid="ignore"):
        resampled = t_hat - (counts @ grad) / (counts @ curv)
    tail = (1.0 - confidence) / 2
    lo, hi = (float(v) for v in np.quantile(resampled, [tail, 1.0 - tail]))
    sensitivity = float(slopes(declared)[0].abs().mean())
    return {
        **out,
        "t_hat": t_hat,
        "interval": [lo, hi],
        "rms_residual": float(r.pow(2).mean().sqrt()),
        "sensitivity": sensitivity,
        "method": f"least squares on the recorded log-probs (scipy minimize_scalar); {confidence:.0%} bootstrap over {len(kept)} samples",
        "resampled": resampled,
    }


def _bundle_samples(bundles: list, side: str) -> list:
    """(logits, targets, recorded) per sample: the trainer's hidden states through the bundle's own LM-head
    weight in fp64 (as the candidate contracts are computed), against `side`'s recorded log-probs."""
    out = []
    for bundle in bundles:
        recorded = bundle.trainer_log_probs if side == "trainer" else bundle.rollout_log_probs
        if recorded is None:
            continue
        weight = bundle.weight.double()
        for _, start, end in bundle.segments or [(None, 0, bundle.targets.numel())]:
            active = bundle.active[start:end]
            logits = bundle.hidden[start:end][active].double() @ weight.T
            out.append((logits, bundle.targets[start:end][active], recorded[start:end][active].double()))
    return out


def _capture_samples(captures: list[dict], side: str) -> list:
    """(logits, targets, recorded) per captured sample: the side's own LM-head logits (Megatron's forward,
    vLLM's compute_logits) against the log-probs the side recorded in the run (harness.embedded.capture)."""
    out = []
    for capture in captures:
        for sample in capture["samples"]:
            own = sample.get(side) or {}
            if all(own.get(k) is not None for k in ("logits", "targets", "recorded_logprob")):
                out.append((own["logits"].double(), own["targets"], own["recorded_logprob"].double()))
    return out


def _read_captures(dumps_dir) -> tuple[list[dict], list[str]]:
    from pathlib import Path

    from harness.embedded.capture import CaptureProblem, read_capture

    captures, names = [], []
    for path in sorted(Path(dumps_dir).glob("capture_*.pt")) if dumps_dir is not None else []:
        try:
            capture = read_capture(path)
        except CaptureProblem:
            continue  # the boundary table reports an unreadable capture; here it is one source fewer
        if any(s.get("trainer") and s.get("rollout") for s in capture["samples"]):
            captures.append(capture)
            names.append(path.name)
    return captures, names


def temperature_check(bundles: list, dumps_dir, declared: float, max_drift: float, confidence: float, min_removed: float = 0.0) -> dict:
    """Each side's T_hat with its interval, and the band the declared T allows: +- allowed / sensitivity,
    the temperature error whose drift on these tokens would reach `allowed` nats of mean |dlogp|, where
    allowed = max(max_drift, min_removed x the drift the two sides' recorded log-probs show on the same
    tokens). A temperature error inside the band could explain less than `min_removed` of the observed
    drift (or less than the smallest effect the ladder resolves), so it is not the drift's cause - the
    rule the multi-contract rungs use (semantic needs a contract that removes at least min_removed).
    Without the drift term a numerical fault that scatters a side's log-probs (rollout-lse-bf16 on the
    fp32 floor: T_hat 1.00066 [0.99938, 1.00136] against +-5.9e-4) left the probe not checked, though
    no temperature inside its interval explains a measurable share of its drift.
    Source: the run's captures where they hold both engines' own logits (the sampler's contract from the
    logits it was applied to: no upstream drift in the fit), else the probe bundles (the trainer's
    hidden states and LM head, fp64). On the bundles the rollout side's fit carries the drift upstream
    of the LM head as well (noise in the hidden states widens the logits' spread just as a lower T
    does), so there it can pass or stay not checked, never fail (`can_fail`)."""
    captures, names = _read_captures(dumps_dir)
    if captures:
        source, pick = f"each engine's own logits and recorded log-probs in {', '.join(names)}", _capture_samples
        data = captures
    else:
        source, pick = "the probe bundles: the trainer's hidden states and LM-head weight in fp64, each side's recorded log-probs", _bundle_samples
        data = bundles
    samples = {side: pick(data, side) for side in ("trainer", "rollout")}  # the bundles' fp64 logits: built once
    drift = _observed_drift(samples["trainer"], samples["rollout"])
    allowed = max(max_drift, min_removed * drift) if math.isfinite(drift) else max_drift
    sides = {}
    for side in ("trainer", "rollout"):
        fit = fit_temperature(samples[side], declared, confidence)
        fit.pop("resampled", None)  # 2000 figures: the interval summarises them
        if fit["t_hat"] is not None and fit["sensitivity"] > 0 and math.isfinite(fit["sensitivity"]):
            half = allowed / fit["sensitivity"]
            fit["band"] = [declared - half, declared + half]
            lo, hi = fit["interval"]
            fit["margin_widths"] = min(lo - fit["band"][0], fit["band"][1] - hi) / (hi - lo) if hi > lo else None
        fit["can_fail"] = bool(captures) or side == "trainer"
        sides[side] = fit
    return {
        "source": source,
        "declared": declared,
        "max_drift": max_drift,
        "observed_drift": drift,
        "min_removed": min_removed,
        "allowed_drift": allowed,
        "sides": sides,
    }


def _observed_drift(trainer: list, rollout: list) -> float:
    """Mean |trainer - rollout| recorded log-prob over the tokens both sides recorded (finite), sample by
    sample in the order both pickers return them (the same samples and targets); NaN when none pair up."""
    total, count = 0.0, 0
    for (_, t_targets, t_recorded), (_, r_targets, r_recorded) in zip(trainer, rollout):
        if t_recorded.shape != r_recorded.shape or not torch.equal(t_targets, r_targets):
            continue
        both = torch.isfinite(t_recorded) & torch.isfinite(r_recorded)
        total += float((t_recorded[both].double() - r_recorded[both].double()).abs().sum())
        count += int(both.sum())
    return total / count if count else float("nan")


def temperature_status(check: dict) -> tuple[str, str]:
    """pass: every side's interval inside its band; fail: a side's interval wholly outside it; else not checked."""
    texts, inside, outside, missing, confounded = [], [], [], [], []
    for side, fit in check["sides"].items():
        if fit.get("band") is None or not all(math.isfinite(v) for v in fit["interval"] or [math.nan]):
            missing.append(f"{side}: {fit.get('why', 'no finite fit or sensitivity')}")
            continue
        (lo, hi), (blo, bhi) = fit["interval"], fit["band"]
        texts.append(
            f"{side} T_hat {fit['t_hat']:.8f} [{lo:.8f}, {hi:.8f}] (width {hi - lo:.2g}; band [{blo:.6f}, {bhi:.6f}], {fit['tokens']} tokens)"
        )
        beyond = hi < blo or lo > bhi
        (inside if blo <= lo and hi <= bhi else (outside if fit.get("can_fail", True) else confounded) if beyond else []).append(side)
    allowed = check.get("allowed_drift", check["max_drift"])
    band_rule = (
        f"band: the temperature error whose drift would reach {allowed:.3g} nats = max(thresholds.contract_temperature_max_drift "
        f"{check['max_drift']:g}, {check.get('min_removed', 0.0):g} x the observed drift {check.get('observed_drift', float('nan')):.3g})"
    )
    where = f"declared T={check['declared']:g}; {'; '.join(texts)}; {band_rule}; from {check['source']}"
    if outside:
        return "fail", f"semantic: the {outside[0]}'s log-probs follow another temperature than the declared one: {where}"
    if confounded:
        return "not checked", (
            f"temperature not decided: the {confounded[0]}'s fit lies outside the band, but on the trainer's hidden states it carries "
            f"the drift upstream of the LM head too (a capture of its own logits tells the two apart): {where}"
        )
    if missing:
        return "not checked", f"temperature not measured ({'; '.join(missing)})" + (f": {where}" if texts else "")
    if len(inside) == len(check["sides"]):
        return "pass", f"both sides' measured temperature lies within the band around the declared one: {where}"
    return "not checked", f"temperature not decided: an interval straddles the band's edge: {where}"
