"""The seed's acceptance criteria as checks. knobs/acceptance.yaml names them; each takes the
judged run and the other runs it compares with (gathered beforehand, as NEEDS says:
harness.experiment.evidence.acceptance_context), and returns a Verdict.

The judged spec is judged at every seed the stage runs (`JudgeContext.runs`: the run and its
replicates), with the ladder's estimator over seeds (harness.judge.variance): a statistic's standard
error carries what the seeds add, and a side of one seed (a cluster run) carries the seed spread its
spec's A/A runs measured (knobs/effects.yaml).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.judge import stats, variance
from harness.judge.completeness import series_problems
from harness.judge.effects import seed_prior, spec_key
from harness.judge.margin import bound_margin, interval_critical
from harness.judge.verdict import Verdict, after_warmup, finite_values
from harness.records.metric_names import ABS_DIFF, RAW_REWARD
from harness.records.models import Failure
from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.effects_file import REWARD_METRIC as REWARD_SPREAD

# The failures the seed names ("NCCL, HTTP, CUDA illegal access, or OOM"), plus the ones that
# are the same failure seen from another side (a dead engine, a refused connection, a timeout).
BLOCKING_SIGNATURES = {
    "nccl-error",
    "http-error",
    "cuda-illegal-memory-access",
    "cuda-oom",
    "engine-dead",
    "connection-refused",
    "timeout",
    "ray-actor-died",
}


@dataclass
class JudgeContext:
    run: Run
    knobs: Knobs
    near_aligned: Run | None = None  # the near-aligned rung's run at the same stage and mode
    second_seed: Run | None = None  # the judged spec at seed + 1 (an A/A pair); None: not recorded
    log: str | None = None  # the run's log file, where one was recorded (gathered: the judge opens no file)
    log_failures: list[Failure] = field(default_factory=list)  # every failure line the log holds (harness.records.failures)
    # The judged spec at every seed the stage judges (seed .. seed + replicates - 1), the run first;
    # empty: the run alone. The near-aligned rung likewise. Each replicate's log and its failures by
    # run id (gathered as the run's are).
    replicates: list[Run] = field(default_factory=list)
    near_aligned_replicates: list[Run] = field(default_factory=list)
    replicate_logs: dict[str, tuple[str | None, list[Failure]]] = field(default_factory=dict)

    def threshold(self, name: str) -> float:
        return self.knobs.threshold(name)

    @property
    def runs(self) -> list[Run]:
        return self.replicates or [self.run]

    @property
    def near_aligned_runs(self) -> list[Run]:
        return self.near_aligned_replicates or ([self.near_aligned] if self.near_aligned is not None else [])

    def log_of(self, run: Run) -> tuple[str | None, list[Failure]]:
        """A judged run's log file and its failure lines (the run's own, or a replicate's)."""
        if run.id == self.run.id:
            return self.log, self.log_failures
        return self.replicate_logs.get(run.id, (None, []))


def _seed_label(run: Run, runs: list[Run]) -> str:
    return f" (seed {run.spec.flag('seed')})" if len(runs) > 1 else ""


def _run_failures(run: Run, failures: list[Failure], needed: int, label: str) -> tuple[list[str], dict]:
    problems = []
    failures = [f for f in failures if f.signature in BLOCKING_SIGNATURES]
    for failure in failures[:5]:
        problems.append(f"{label}log.txt line {failure.line}: {failure.signature}: {failure.text[:160]}")
    steps = run.steps()
    if len(steps) < needed:
        shown = f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"
        problems.append(f"{label}only {len(steps)} rollout steps logged ({shown}); thresholds.min_rollout_steps = {needed}")
    if run.status is not None and run.status.state != "finished":
        problems.append(
            f"{label}run state is {run.status.state!r}"
            + (f" ({run.status.failure.signature} at log line {run.status.failure.line})" if run.status.failure else "")
        )
    return problems, {"steps_logged": len(steps), "blocking_failures": [f.model_dump() for f in failures]}


def completes_without_failures(ctx: JudgeContext) -> Verdict:
    """Every judged seed's run completes min_rollout_steps without a blocking failure."""
    needed = int(ctx.threshold("min_rollout_steps"))
    problems, evidence = [], {}
    for run in ctx.runs:
        label = _seed_label(run, ctx.runs).strip()
        found, evidence[run.id] = _run_failures(run, ctx.log_of(run)[1], needed, f"{label}: " if label else "")
        problems += found
    if problems:
        return Verdict(False, "; ".join(problems), evidence)
    steps = min(e["steps_logged"] for e in evidence.values())
    seeds = f" at each of {len(ctx.runs)} seeds" if len(ctx.runs) > 1 else ""
    return Verdict(True, f"{steps} rollout steps or more{seeds}, no NCCL/HTTP/CUDA/OOM failure in the log", evidence)


def _reward_windows(run: Run, window: int, ratio: float, floor: float) -> tuple[dict | None, str]:
    """One run's best and late reward windows and its limit; (None, why) when it cannot be judged."""
    steps, values, bad = finite_values(run.series(RAW_REWARD))
    if bad:
        return None, f"{RAW_REWARD} is missing or not finite at steps {bad[:10]}"
    if len(values) < 2 * window:
        return None, f"{RAW_REWARD}: {len(values)} steps logged, need {2 * window} (two windows of thresholds.reward_window_steps = {window})"
    means = np.convolve(values, np.ones(window) / window, mode="valid")
    best = int(np.argmax(means))
    return {
        "best_window_steps": [steps[best], steps[best + window - 1]],
        "best_window_mean": float(means[best]),
        "late_window_steps": [steps[-window], steps[-1]],
        "late_window_mean": float(means[-1]),
        "late_values": [float(v) for v in values[-window:]],
        "limit": max(floor, ratio * float(means[best])),
    }, ""


def reward_does_not_collapse(ctx: JudgeContext) -> Verdict:
    """No judged seed's late reward window falls under max(reward_min_late_mean, reward_collapse_ratio x
    its best window); the margin is the late windows' mean over seeds against their limits' mean, in
    standard errors over seeds (harness.judge.variance; one seed: its window's noise plus the A/A spread)."""
    window = int(ctx.threshold("reward_window_steps"))
    ratio = ctx.threshold("reward_collapse_ratio")
    floor = ctx.threshold("reward_min_late_mean")
    per_seed, problems = {}, []
    for run in ctx.runs:
        label = _seed_label(run, ctx.runs)
        windows, why = _reward_windows(run, window, ratio, floor)
        if windows is None:
            return Verdict(False, why + label, {"bad_steps": why})
        per_seed[run.id] = windows
        late, best = windows["late_window_mean"], windows["best_window_mean"]
        steps = windows["late_window_steps"]
        if late < floor:
            problems.append(
                f"{RAW_REWARD} collapsed{label}: mean of steps {steps[0]}-{steps[1]} = {late:.3f} < thresholds.reward_min_late_mean = {floor}"
            )
        elif late < ratio * best:
            best_steps = windows["best_window_steps"]
            problems.append(
                f"{RAW_REWARD} collapsed{label}: mean of steps {steps[0]}-{steps[1]} = {late:.3f} "
                f"< {ratio} x best window (steps {best_steps[0]}-{best_steps[1]}, mean {best:.3f}) (thresholds.reward_collapse_ratio)"
            )
    prior = seed_prior(ctx.knobs, spec_key(ctx.run.spec.rung, ctx.run.spec.mode), REWARD_SPREAD) if len(ctx.runs) == 1 else None
    side = variance.side_estimate([w["late_values"] for w in per_seed.values()], prior, "late window")
    limit = float(np.mean([w["limit"] for w in per_seed.values()]))
    first = per_seed[ctx.run.id]
    evidence = {
        "window": window,
        "best_window_steps": first["best_window_steps"],
        "best_window_mean": first["best_window_mean"],
        "late_window_mean": side.mean,
        "late_window_steps": first["late_window_steps"],
        "per_seed": {run_id: {k: v for k, v in w.items() if k != "late_values"} for run_id, w in per_seed.items()},
        "se_from": side.seed_part,
        "margin": bound_margin(side.mean, side.se, limit, upper=False, sample={"seeds": len(per_seed), "steps": window}).as_dict(),
    }
    if problems:
        return Verdict(False, "; ".join(problems), evidence)
    seeds = f" (mean of {len(per_seed)} seeds)" if len(per_seed) > 1 else ""
    return Verdict(
        True,
        f"late-window reward {side.mean:.3f}{seeds} vs the limit {limit:.3f} (best window {first['best_window_mean']:.3f}): no collapse",
        evidence,
    )


def _present_every_step(run: Run, label: str) -> tuple[list[str], dict]:
    steps = run.steps()
    logged = dict(run.series(ABS_DIFF))
    missing = [s for s in steps if s not in logged]
    _, _, not_finite = finite_values([(s, logged[s]) for s in steps if s in logged])
    evidence = {"steps": len(steps), "missing": missing, "not_finite": not_finite}
    if not steps:
        return [f"no step records in the run at all{label}"], evidence
    parts = []
    if missing:
        parts.append(f"missing at steps {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if not_finite:
        parts.append(f"not finite at steps {not_finite[:10]}")
    return ([f"{ABS_DIFF} " + "; ".join(parts) + f" (of {len(steps)} steps){label}"] if parts else []), evidence


def abs_diff_present_every_step(ctx: JudgeContext) -> Verdict:
    problems, evidence = [], {}
    for run in ctx.runs:
        found, evidence[run.id] = _present_every_step(run, _seed_label(run, ctx.runs))
        problems += found
    if len(ctx.runs) == 1:
        evidence = evidence[ctx.run.id]
    if problems:
        return Verdict(False, "; ".join(problems), evidence)
    seeds = f" at each of {len(ctx.runs)} seeds" if len(ctx.runs) > 1 else ""
    return Verdict(True, f"{ABS_DIFF} logged and finite at all {len(ctx.run.steps())} steps{seeds}", evidence)


def _side_series(runs: list[Run], warmup: int) -> list[list[float]]:
    return [after_warmup(run.series(ABS_DIFF), warmup)[1] for run in runs]


def mismatch_above_near_aligned(ctx: JudgeContext) -> Verdict:
    """The baseline's abs-diff above the near-aligned rung's over the judged seeds (harness.judge.variance:
    each side its run means' spread, a one-seed side with its spec's A/A spread): the interval's low
    end above zero and the difference at least rung_min_abs_delta."""
    warmup = int(ctx.threshold("warmup_steps"))
    confidence = ctx.threshold("bootstrap_confidence")
    min_delta = ctx.threshold("rung_min_abs_delta")
    near_runs = ctx.near_aligned_runs
    if not near_runs:
        return Verdict(False, "not judged: no near-aligned run was given to compare with", {"outcome": "not judged"})
    # A missing or non-finite step makes the answer "not judged", naming it: never a shorter series.
    incomplete = [p for run in ctx.runs for p in series_problems(run, ABS_DIFF, ctx.knobs, "baseline" + _seed_label(run, ctx.runs))]
    incomplete += [p for run in near_runs for p in series_problems(run, ABS_DIFF, ctx.knobs, "near-aligned" + _seed_label(run, near_runs))]
    if incomplete:
        return Verdict(False, "not judged: " + "; ".join(incomplete), {"outcome": "not judged"})
    baseline, reference = _side_series(ctx.runs, warmup), _side_series(near_runs, warmup)
    mode = ctx.run.spec.mode
    prior_near = seed_prior(ctx.knobs, spec_key("near-aligned", mode)) if len(reference) == 1 else None
    prior_base = seed_prior(ctx.knobs, spec_key(ctx.run.spec.rung, mode)) if len(baseline) == 1 else None
    diff = variance.replicated_diff_ci(reference, baseline, confidence, prior_near, prior_base)
    sample = {"seeds_per_side": [len(baseline), len(reference)], "steps_per_side": [sum(map(len, baseline)), sum(map(len, reference))]}
    baseline_mean = float(np.mean([np.mean(v) for v in baseline]))
    near_mean = float(np.mean([np.mean(v) for v in reference]))
    evidence = {
        "near_aligned_run": near_runs[0].id,
        "baseline_mean": baseline_mean,
        "near_aligned_mean": near_mean,
        "diff": diff.diff,
        "ci": [diff.low, diff.high],
        # Measurably above: two decisions, the interval's low edge above zero and the difference at
        # least rung_min_abs_delta; the margin is the nearer of the two to flipping.
        "margin": min(
            bound_margin(diff.diff, diff.se, 0.0, upper=False, sample=sample, critical=interval_critical(diff.low, diff.high, diff.se)),
            bound_margin(diff.diff, diff.se, min_delta, upper=False, sample=sample),
            key=lambda m: m.se_units if m.se_units == m.se_units else float("-inf"),
        ).as_dict(),
    }
    seeds = f" over {len(baseline)} and {len(reference)} seeds" if len(baseline) + len(reference) > 2 else ""
    head = f"abs-diff {baseline_mean:.4g} vs near-aligned {near_mean:.4g}{seeds}: difference {diff.diff:.4g}, {confidence:.0%} CI [{diff.low:.4g}, {diff.high:.4g}]"
    if diff.low <= 0:
        return Verdict(False, f"{head} includes zero or lies below it: not measurably above the near-aligned rung", evidence)
    if diff.diff < min_delta:
        return Verdict(False, f"{head}: below thresholds.rung_min_abs_delta = {min_delta}", evidence)
    ceiling = ctx.threshold("vime_hardcoded_max_abs_diff")
    if baseline_mean > ceiling:
        return Verdict(
            False,
            f"{head}: measurable, but above VIME's own bound thresholds.vime_hardcoded_max_abs_diff = {ceiling} "
            "(seed: if the mismatch is too large, reduce the sampling filters)",
            evidence,
        )
    return Verdict(True, head, evidence)


def stable_under_aa(ctx: JudgeContext) -> Verdict:
    """Two seeds of the same spec agree (A/A) within aa_max_rel_diff: the relative difference of the
    first two judged seeds' means, its standard error that of any two seeds' difference, from the run
    means' spread over every judged seed (harness.judge.variance; with fewer than three seeds, the
    spec's A/A spread on the design seeds, knobs/effects.yaml), the whole interval inside the band.
    Without a second seed, or with too few steps, it is not judged: never a pass."""
    warmup = int(ctx.threshold("warmup_steps"))
    rel_tol = ctx.threshold("aa_max_rel_diff")
    confidence = ctx.threshold("bootstrap_confidence")
    runs = ctx.runs if len(ctx.runs) > 1 else [ctx.run, *([ctx.second_seed] if ctx.second_seed is not None else [])]
    if len(runs) < 2:
        return Verdict(False, "not judged: one seed of the judged spec; an A/A needs two", {"outcome": "not judged"})
    incomplete = [p for run in runs for p in series_problems(run, ABS_DIFF, ctx.knobs, f"seed {run.spec.seed}")]
    if incomplete:
        return Verdict(False, "not judged: " + "; ".join(incomplete), {"outcome": "not judged"})
    series = _side_series(runs, warmup)
    means = np.array([np.mean(v) for v in series])
    scale = float(np.mean(np.abs(means[:2])))
    rel = float((means[1] - means[0]) / scale) if scale > 0 else float("nan")
    prior = seed_prior(ctx.knobs, spec_key(ctx.run.spec.rung, ctx.run.spec.mode))
    if len(runs) >= 3:
        spread, df, source = float(np.std(means, ddof=1)) / float(np.mean(means)), float(len(runs) - 1), f"the {len(runs)} judged seeds' spread"
    elif prior is not None:
        spread, df, source = prior.relative_sd, prior.df, f"the A/A spread on the design seeds ({prior.source})"
    else:
        return Verdict(False, "not judged: two seeds and no A/A spread measured for the spec (knobs/effects.yaml)", {"outcome": "not judged"})
    se = float(np.sqrt(2.0)) * spread
    check = stats.DiffCI.around(rel, se, df, confidence)
    stable = -rel_tol <= check.low and check.high <= rel_tol
    seeds = [run.spec.seed for run in runs[:2]]
    evidence = {
        "compared": f"seeds {seeds[0]} and {seeds[1]}",
        "mean_a": float(means[0]),
        "mean_b": float(means[1]),
        "rel_diff": rel,
        "rel_ci": [check.low, check.high],
        "rel_tol": rel_tol,
        "se_from": source,
        # Equivalence: |relative difference| within rel_tol; it flips where the interval's edge reaches the band.
        "margin": bound_margin(
            abs(rel),
            se,
            rel_tol,
            upper=True,
            sample={"seeds": len(runs), "steps": [len(v) for v in series]},
            critical=interval_critical(check.low, check.high, se),
        ).as_dict(),
    }
    message = (
        f"A/A over seeds {seeds[0]} and {seeds[1]}: means {means[0]:.4g} and {means[1]:.4g}, relative difference "
        f"{rel:+.1%} (SE {se:.1%} from {source}; {confidence:.0%} CI [{check.low:+.1%}, {check.high:+.1%}]) vs thresholds.aa_max_rel_diff "
        f"{rel_tol:.0%}: {'stable' if stable else 'not shown stable'}"
    )
    return Verdict(bool(stable), message, evidence)


def _image(container: dict) -> tuple[str | None, str]:
    """The image the run's environment record names, or what it recorded instead (never filled in here)."""
    if container.get("image"):
        return str(container["image"]), f"from {container.get('source') or 'the environment record'}"
    hints = container.get("container_hints")
    if hints == []:
        return "none: the run's host showed no container (no /.dockerenv, no /run/.containerenv)", "measured absence"
    shown = f" (container hints: {', '.join(hints)})" if hints else ""
    return None, f"not recorded{shown}: {container.get('note') or 'the environment record names no image'}"


def _links(env: dict, log: str | None) -> tuple[str | None, str]:
    """The W&B link when the run tracked to W&B (its URL, or an offline run's directory and id), else the log."""
    wandb = env.get("wandb")
    if wandb is not None:
        link = wandb.get("url") or (f"offline {wandb.get('dir')} ({wandb.get('id')})" if wandb.get("dir") and wandb.get("id") else None)
        return link, "W&B run" if link else f"W&B was on but the record names no run: {wandb.get('note') or 'no URL, no offline directory'}"
    return log, "log (W&B off: the run was launched without --use-wandb)"


def record_is_complete(ctx: JudgeContext) -> Verdict:
    """Commit, image, hardware, mode, exact config and the W&B or log link, each as the run recorded
    it: nothing is filled in by the check. A W&B run must name its link; without W&B the log is the link."""
    run = ctx.run
    env = run.environment or {}
    commit = (env.get("vime") or {}).get("commit") or (env.get("harness") or {}).get("commit")
    hardware = env.get("hardware") or {}
    image, image_how = _image(env.get("container") or {})
    link, link_how = _links(env, ctx.log)
    fields = {
        "commit": commit,
        "image": image,
        "hardware": (hardware.get("gpus") or {}).get("models") or hardware.get("cpu"),
        "mode": run.spec.mode,
        "exact config": run.argv,
        "W&B/log link": link,
    }
    missing = [name for name, value in fields.items() if not value]
    evidence = {name: (value if not isinstance(value, list) else f"{len(value)} argv items") for name, value in fields.items()}
    evidence |= {"image_source": image_how, "link_source": link_how}
    if missing:
        why = {"image": image_how, "W&B/log link": link_how}
        parts = [f"{name} ({why[name]})" if name in why else name for name in missing]
        return Verdict(False, f"run record {run.id} lacks: {', '.join(parts)} (environment.json / spec.yaml / argv.json / log.txt)", evidence)
    return Verdict(
        True,
        f"commit {str(commit)[:12]}, image {image} ({image_how}), mode {fields['mode']}, {len(run.argv)} argv items, {link_how} at {link}",
        evidence,
    )


CHECKS: dict[str, Callable[[JudgeContext], Verdict]] = {
    fn.__name__: fn
    for fn in (
        completes_without_failures,
        reward_does_not_collapse,
        abs_diff_present_every_step,
        mismatch_above_near_aligned,
        stable_under_aa,
        record_is_complete,
    )
}

# The other runs each check compares with (JudgeContext's fields); a check not named needs none.
NEEDS: dict[str, tuple[str, ...]] = {
    "mismatch_above_near_aligned": ("near_aligned",),
    "stable_under_aa": ("second_seed",),
}
