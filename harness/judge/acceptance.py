"""The seed's acceptance criteria as checks. knobs/acceptance.yaml names them; each takes the
judged run and the other runs it compares with (gathered beforehand, as NEEDS says:
harness.experiment.evidence.acceptance_context), and returns a Verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.judge import stats
from harness.judge.completeness import series_problems
from harness.judge.margin import bound_margin, interval_critical
from harness.judge.verdict import Verdict, after_warmup, finite_values
from harness.records.metric_names import ABS_DIFF, RAW_REWARD
from harness.records.models import Failure
from harness.records.runload import Run
from harness.spec import Knobs, backends

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

    def threshold(self, name: str) -> float:
        return self.knobs.threshold(name)


def completes_without_failures(ctx: JudgeContext) -> Verdict:
    run, needed = ctx.run, int(ctx.threshold("min_rollout_steps"))
    problems = []
    failures = [f for f in ctx.log_failures if f.signature in BLOCKING_SIGNATURES]
    for failure in failures[:5]:
        problems.append(f"log.txt line {failure.line}: {failure.signature}: {failure.text[:160]}")
    steps = run.steps()
    if len(steps) < needed:
        shown = f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"
        problems.append(f"only {len(steps)} rollout steps logged ({shown}); thresholds.min_rollout_steps = {needed}")
    if run.status is not None and run.status.state != "finished":
        problems.append(
            f"run state is {run.status.state!r}"
            + (f" ({run.status.failure.signature} at log line {run.status.failure.line})" if run.status.failure else "")
        )
    evidence = {"steps_logged": len(steps), "blocking_failures": [f.model_dump() for f in failures]}
    if problems:
        return Verdict(False, "; ".join(problems), evidence)
    return Verdict(True, f"{len(steps)} rollout steps, no NCCL/HTTP/CUDA/OOM failure in the log", evidence)


def reward_does_not_collapse(ctx: JudgeContext) -> Verdict:
    window = int(ctx.threshold("reward_window_steps"))
    ratio = ctx.threshold("reward_collapse_ratio")
    floor = ctx.threshold("reward_min_late_mean")
    series = ctx.run.series(RAW_REWARD)
    steps, values, bad = finite_values(series)
    if bad:
        return Verdict(False, f"{RAW_REWARD} is missing or not finite at steps {bad[:10]}", {"bad_steps": bad})
    if len(values) < 2 * window:
        return Verdict(
            False, f"{RAW_REWARD}: {len(values)} steps logged, need {2 * window} (two windows of thresholds.reward_window_steps = {window})"
        )
    means = np.convolve(values, np.ones(window) / window, mode="valid")
    best = int(np.argmax(means))
    late = float(means[-1])
    evidence = {
        "window": window,
        "best_window_steps": [steps[best], steps[best + window - 1]],
        "best_window_mean": float(means[best]),
        "late_window_mean": late,
        "late_window_steps": [steps[-window], steps[-1]],
    }
    # The late window's mean against the larger of its two limits, in standard errors of that mean.
    late_values = np.asarray(values[-window:])
    late_se = float(np.std(late_values, ddof=1) / np.sqrt(window)) if window > 1 else float("nan")
    limit = max(floor, ratio * float(means[best]))
    evidence["margin"] = bound_margin(late, late_se, limit, upper=False, sample={"seeds": 1, "steps": window}).as_dict()
    if late < floor:
        return Verdict(
            False,
            f"{RAW_REWARD} collapsed: mean of steps {steps[-window]}-{steps[-1]} = {late:.3f} < thresholds.reward_min_late_mean = {floor}",
            evidence,
        )
    if late < ratio * means[best]:
        return Verdict(
            False,
            f"{RAW_REWARD} collapsed: mean of steps {steps[-window]}-{steps[-1]} = {late:.3f} "
            f"< {ratio} x best window (steps {steps[best]}-{steps[best + window - 1]}, mean {means[best]:.3f}) "
            f"(thresholds.reward_collapse_ratio)",
            evidence,
        )
    return Verdict(True, f"late-window reward {late:.3f} vs best window {means[best]:.3f}: no collapse", evidence)


def abs_diff_present_every_step(ctx: JudgeContext) -> Verdict:
    steps = ctx.run.steps()
    logged = dict(ctx.run.series(ABS_DIFF))
    missing = [s for s in steps if s not in logged]
    _, _, not_finite = finite_values([(s, logged[s]) for s in steps if s in logged])
    evidence = {"steps": len(steps), "missing": missing, "not_finite": not_finite}
    if not steps:
        return Verdict(False, "no step records in the run at all", evidence)
    if missing or not_finite:
        parts = []
        if missing:
            parts.append(f"missing at steps {missing[:10]}{' ...' if len(missing) > 10 else ''}")
        if not_finite:
            parts.append(f"not finite at steps {not_finite[:10]}")
        return Verdict(False, f"{ABS_DIFF} " + "; ".join(parts) + f" (of {len(steps)} steps)", evidence)
    return Verdict(True, f"{ABS_DIFF} logged and finite at all {len(steps)} steps", evidence)


def mismatch_above_near_aligned(ctx: JudgeContext) -> Verdict:
    warmup = int(ctx.threshold("warmup_steps"))
    confidence = ctx.threshold("bootstrap_confidence")
    min_delta = ctx.threshold("rung_min_abs_delta")
    near = ctx.near_aligned
    if near is None:
        return Verdict(False, "not judged: no near-aligned run was given to compare with", {"outcome": "not judged"})
    # A missing or non-finite step makes the answer "not judged", naming it: never a shorter series.
    incomplete = series_problems(ctx.run, ABS_DIFF, ctx.knobs, "baseline") + series_problems(near, ABS_DIFF, ctx.knobs, "near-aligned")
    if incomplete:
        return Verdict(False, "not judged: " + "; ".join(incomplete), {"outcome": "not judged"})
    _, baseline = after_warmup(ctx.run.series(ABS_DIFF), warmup)
    _, reference = after_warmup(near.series(ABS_DIFF), warmup)
    diff = stats.block_bootstrap_diff_ci(reference, baseline, confidence=confidence)
    sample = {"seeds_per_side": [1, 1], "steps_per_side": [len(baseline), len(reference)]}
    evidence = {
        "near_aligned_run": near.id,
        "baseline_mean": float(np.mean(baseline)),
        "near_aligned_mean": float(np.mean(reference)),
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
    head = (
        f"abs-diff {evidence['baseline_mean']:.4g} vs near-aligned {evidence['near_aligned_mean']:.4g}: "
        f"difference {diff.diff:.4g}, {confidence:.0%} CI [{diff.low:.4g}, {diff.high:.4g}]"
    )
    if diff.low <= 0:
        return Verdict(False, f"{head} includes zero or lies below it: not measurably above the near-aligned rung", evidence)
    if diff.diff < min_delta:
        return Verdict(False, f"{head}: below thresholds.rung_min_abs_delta = {min_delta}", evidence)
    ceiling = ctx.threshold("vime_hardcoded_max_abs_diff")
    if evidence["baseline_mean"] > ceiling:
        return Verdict(
            False,
            f"{head}: measurable, but above VIME's own bound thresholds.vime_hardcoded_max_abs_diff = {ceiling} "
            "(seed: if the mismatch is too large, reduce the sampling filters)",
            evidence,
        )
    return Verdict(True, head, evidence)


def stable_under_aa(ctx: JudgeContext) -> Verdict:
    """Two seeds of the same spec agree (A/A); without a second seed, the run's two halves."""
    warmup = int(ctx.threshold("warmup_steps"))
    rel_tol = ctx.threshold("aa_max_rel_diff")
    _, a = after_warmup(ctx.run.series(ABS_DIFF), warmup)
    seed, other = ctx.run.spec.seed, ctx.second_seed
    # A missing or non-finite step makes the answer "not judged", naming it: never a shorter series.
    incomplete = series_problems(ctx.run, ABS_DIFF, ctx.knobs, f"seed {seed}")
    if other is not None:
        incomplete += series_problems(other, ABS_DIFF, ctx.knobs, f"seed {seed + 1}")
    if incomplete:
        return Verdict(False, "not judged: " + "; ".join(incomplete), {"outcome": "not judged"})
    if other is not None:
        _, b = after_warmup(other.series(ABS_DIFF), warmup)
        how = f"seeds {seed} and {seed + 1}"
    else:
        a, b = (list(half) for half in stats.split_halves(a))
        how = "the run's two halves (no second-seed run available)"
    if len(a) < 3 or len(b) < 3:
        return Verdict(False, f"A/A over {how}: too few steps after warm-up ({len(a)} and {len(b)})")
    check = stats.aa_check(a, b, rel_tol=rel_tol)
    evidence = {
        "compared": how,
        "mean_a": check.mean_a,
        "mean_b": check.mean_b,
        "rel_diff": check.rel_diff,
        "rel_ci": [check.rel_ci_low, check.rel_ci_high],
        "rel_tol": rel_tol,
        # Equivalence: |relative difference| within rel_tol, in standard errors of the relative difference.
        "margin": bound_margin(
            abs(check.rel_diff),
            check.rel_se,
            rel_tol,
            upper=True,
            sample={"seeds": 2 if other else 1, "steps": [len(a), len(b)]},
            # Equivalence is decided by the whole interval inside +/-rel_tol: it flips at the interval's edge.
            critical=interval_critical(check.rel_ci_low, check.rel_ci_high, check.rel_se) if check.criterion == "equivalence" else 0.0,
        ).as_dict(),
    }
    message = (
        f"A/A over {how}: means {check.mean_a:.4g} and {check.mean_b:.4g}, relative difference "
        f"{check.rel_diff:+.1%} (CI [{check.rel_ci_low:+.1%}, {check.rel_ci_high:+.1%}]) vs thresholds.aa_max_rel_diff "
        f"{rel_tol:.0%}: {check.reason}"
    )
    return Verdict(check.stable, message, evidence)


def record_is_complete(ctx: JudgeContext) -> Verdict:
    run = ctx.run
    env = run.environment or {}
    commit = (env.get("vime") or {}).get("commit") or (env.get("harness") or {}).get("commit")
    container = env.get("container") or {}
    hardware = env.get("hardware") or {}
    fields = {
        "commit": commit,
        # The miniature runs in no container by design; a cluster run must name its image.
        "image": container.get("image")
        or (f"none ({run.spec.backend} backend, no container)" if getattr(backends.of_run(run.spec.backend), "trainer_in_repo", False) else None),
        "hardware": (hardware.get("gpus") or {}).get("models") or hardware.get("cpu"),
        "mode": run.spec.mode,
        "exact config": run.argv,
        "log": ctx.log,
    }
    missing = [name for name, value in fields.items() if not value]
    evidence = {name: (value if not isinstance(value, list) else f"{len(value)} argv items") for name, value in fields.items()}
    if missing:
        return Verdict(False, f"run record {run.id} lacks: {', '.join(missing)} (environment.json / spec.yaml / argv.json / log.txt)", evidence)
    return Verdict(
        True,
        f"commit {str(commit)[:12]}, image {fields['image']}, mode {fields['mode']}, {len(run.argv)} argv items, log at {fields['log']}",
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
