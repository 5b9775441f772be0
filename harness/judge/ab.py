"""The P3 A/B gate: baseline vs candidate under the same workload, then the seed's five questions.

First the contract (seed: "same workload, same seeds, same prompts, same rollout settings, same
hardware, same commit/docker image"): a candidate that changes anything but its operator path,
hides a fallback, or changes the sampled-token contract is rejected, whatever its numbers. Then
each question gets a verdict with a block-bootstrap confidence interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.judge import outcome as outcomes
from harness.judge import stats, variance
from harness.judge.candidate_execution import Execution
from harness.judge.candidate_gate import candidate_kind, gate_label
from harness.judge.completeness import series_problems
from harness.judge.decisions import fallbacks
from harness.judge.effects import ab_question, mode_question, pair_prior, question_effect
from harness.judge.margin import interval_critical, noninferiority_margin, outcome_margin
from harness.judge.verdict import after_warmup
from harness.records.metric_names import ABS_DIFF, RAW_REWARD
from harness.records.runload import Run
from harness.spec import Knobs, backends
from harness.spec.flag_read import flag_value
from harness.spec.run_identity import NOT_WHAT_RUNS


@dataclass
class Answer:
    question: str
    passed: bool
    message: str
    evidence: dict = field(default_factory=dict)


def _environment_identity(run: Run) -> dict:
    env = run.environment or {}
    hardware = env.get("hardware") or {}
    # The embedded trainer is this repository's code: its source version is the "commit" that
    # matters (judging code may change between the two runs without changing either run).
    code = run.spec.code_version if getattr(backends.of_run(run.spec.backend), "trainer_in_repo", False) else None
    return {
        "commit": code or (env.get("vime") or {}).get("commit") or (env.get("harness") or {}).get("commit"),
        "image": (env.get("container") or {}).get("image"),
        "hardware": (hardware.get("gpus") or {}).get("models") or (hardware.get("cpu") or {}).get("model"),
    }


@dataclass(frozen=True)
class PairFiles:
    """What the contract reads from the two runs' files, gathered by the caller
    (harness.experiment.evidence.pair_files): the judge opens none of them."""

    prompts: tuple[str | None, str | None]  # sha256 of each side's prompt data; None: unreadable
    # The candidate's execution judged: an embedded run's operator counts (harness.judge.candidate_execution),
    # a VIME run's own log (harness.judge.vime_execution); None when nothing could be judged.
    execution: Execution | None
    decisions: list[dict]  # the candidate's rl_kernel.execution_decision records (each with its log line, `_line`)
    decision_warnings: list[str]  # lines that looked like a decision record and did not parse


def execution_problems(files: PairFiles) -> list[str]:
    """An embedded candidate's operator, counted inside the calls by both engines (operator_calls.json):
    "candidate not executed" when an expected count is zero, "candidate not checked" when no counts
    were recorded. A VIME run's evidence is its own log (harness.judge.vime_execution)."""
    if files.execution is None or files.execution.passed:
        return []
    return [files.execution.message]


def contract_problems(baseline: Run, candidate: Run, knobs: Knobs, files: PairFiles) -> list[str]:
    """Why this pair is not a same-workload A/B (empty when it is)."""
    problems = []
    a, b = dict(baseline.spec.flags), dict(candidate.spec.flags)
    operator_flags = set(knobs.ab.operator_path_flags.flags)
    # A mitigation may change the loss and the trajectory, never the sampled tokens (checked below);
    # a planted fault is a negative control's one change (harness.judge.candidate_gate names it so).
    planted = set(knobs.ab.planted_fault_flags.flags) if knobs.ab.planted_fault_flags else set()
    allowed = operator_flags | set(knobs.ab.mitigation_flags.flags) | planted
    # Prompts are compared by content below: the same file at another path is the same workload.
    # Where a run's metrics and dumps go is not its workload (harness.spec.run_identity).
    differing = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} - {"prompt-data"} - NOT_WHAT_RUNS
    sampling = differing & set(knobs.ab.sampling_contract_flags.flags)
    if sampling:
        problems.append(
            "the candidate changes the sampled-token contract: " + ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(sampling))
        )
    other = differing - allowed - sampling
    if other:
        problems.append(
            "the resolved specs differ outside the operator path and the mitigations (knobs/ab.yaml): "
            + ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(other))
        )
    if not differing & allowed:
        problems.append("the candidate changes no operator-path or mitigation flag (knobs/ab.yaml): it is the baseline again")
    fa, fb = files.prompts
    if fa != fb or fa is None:
        problems.append(
            f"the prompt files differ in content or cannot be read (sha256 {str(fa)[:12]} vs {str(fb)[:12]}; "
            f"--prompt-data {a.get('prompt-data')!r} vs {b.get('prompt-data')!r})"
        )
    ia, ib = _environment_identity(baseline), _environment_identity(candidate)
    for key in ia:
        if ia[key] != ib[key]:
            problems.append(f"{key} differs: baseline {ia[key]!r}, candidate {ib[key]!r}")
    if differing & operator_flags:
        problems += execution_problems(files)
    if not getattr(backends.of_run(candidate.spec.backend), "trainer_in_repo", False) and files.execution is not None:
        return problems  # its own log's op lines, fallback counters and decisions were judged (harness.judge.vime_execution)
    decisions = files.decisions
    problems += files.decision_warnings
    if not decisions:
        problems.append("the candidate logged no rl_kernel.execution_decision records: nothing proves its path ran")
    for record in fallbacks(decisions)[:3]:
        problems.append(
            f"the candidate fell back (log.txt line {record['_line']}): requested {record.get('requested_backend')!r}, "
            f"ran {record.get('actual_backend')!r}, decision {record.get('decision')!r}, reason {record.get('fallback_reason')!r}"
        )
    return problems


def what_changed(baseline: Run, candidate: Run, knobs: Knobs) -> list[str]:
    """The candidate's changes the gate allows, by kind (operator path, mitigation), for the record."""
    a, b = baseline.spec.flags, candidate.spec.flags
    kinds = (
        ("operator path", knobs.ab.operator_path_flags.flags),
        ("mitigation (loss and trajectory, not the sampled tokens)", knobs.ab.mitigation_flags.flags),
    )
    lines = []
    for kind, flags in kinds:
        changed = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(flags) if a.get(k) != b.get(k)]
        if changed:
            lines.append(f"{kind}: " + ", ".join(changed))
    return lines


Side = Run | list[Run]  # one run, or the replicates of one side (the same spec at seeds seed, seed + 1, ...)


def _replicates(side: Side) -> list[Run]:
    return list(side) if isinstance(side, (list, tuple)) else [side]


def _first_pair(baseline: Side, candidate: Side) -> tuple[Run, Run]:
    return _replicates(baseline)[0], _replicates(candidate)[0]


def _incomplete(baseline: Side, candidate: Side, metric: str, knobs: Knobs) -> list[str]:
    """Missing or non-finite steps on either side, any replicate (thresholds.max_missing_steps, min_judged_steps)."""
    problems = []
    for index, (a, b) in enumerate(zip(_replicates(baseline), _replicates(candidate), strict=True)):
        suffix = f" (seed {a.spec.flag('seed')})" if index else ""
        problems += series_problems(a, metric, knobs, "baseline" + suffix) + series_problems(b, metric, knobs, "candidate" + suffix)
    return problems


def _paired_steps(baseline: Run, candidate: Run, metric: str, warmup: int) -> tuple[list[float], list[float]]:
    steps_a, values_a = after_warmup(baseline.series(metric), warmup)
    steps_b, values_b = after_warmup(candidate.series(metric), warmup)
    by_step_a, by_step_b = dict(zip(steps_a, values_a)), dict(zip(steps_b, values_b))
    common = sorted(by_step_a.keys() & by_step_b.keys())
    return [by_step_a[s] for s in common], [by_step_b[s] for s in common]


def candidate_name(baseline: Run, candidate: Run, knobs: Knobs) -> str:
    """Which of knobs/ab.yaml's candidates this is: a further candidate whose `set` the candidate's
    flags carry over the baseline's, else the pair's own ("pair")."""
    for name, further in knobs.ab.candidates.items():
        if all(flag_value(candidate.spec.flags, k) == v != flag_value(baseline.spec.flags, k) for k, v in further.set.items()):
            return name
    return "pair"


def _compare(baseline: Side, candidate: Side, metric: str, knobs: Knobs) -> tuple[stats.DiffCI | None, float, float]:
    """The candidate-minus-baseline interval over the steps both logged after the warm-up, paired
    step by step: the contract gives both runs the same seeds and prompts at each step, so what a
    step's prompts do to the metric cancels in its difference (A/B rewards correlated 0.76-0.81
    per step in colocate, docs/statistics.md). Each pair's per-step differences are one run of the
    difference, the pairs one side over seeds (harness.judge.variance.paired_diff_ci); a single pair
    carries the seed spread the design's A/A pairs measured (knobs/effects.yaml)."""
    warmup = int(knobs.threshold("warmup_steps"))
    confidence = knobs.threshold("bootstrap_confidence")
    sides = list(zip(_replicates(baseline), _replicates(candidate), strict=True))
    pairs = [_paired_steps(a, b, metric, warmup) for a, b in sides]
    if any(len(a) < 3 for a, _ in pairs):
        return None, float("nan"), float("nan")
    mean_a = float(np.mean([np.mean(a) for a, _ in pairs]))
    mean_b = float(np.mean([np.mean(b) for _, b in pairs]))
    prior = pair_prior(knobs, candidate_name(*sides[0], knobs), metric, mean_a) if len(pairs) == 1 else None
    return variance.paired_diff_ci(pairs, confidence, prior), mean_a, mean_b


def paired_metric(baseline: Side, candidate: Side, metric: str, knobs: Knobs) -> tuple[stats.DiffCI | None, float, float, str]:
    """Any metric's candidate-minus-baseline interval as the gate's questions judge theirs (paired step
    by step, over the pairs), with the two means and, when no interval can be judged, the reason."""
    return _judged(baseline, candidate, metric, knobs)


def _judged(baseline: Side, candidate: Side, metric: str, knobs: Knobs) -> tuple[stats.DiffCI | None, float, float, str]:
    """_compare after the completeness check; when no interval can be judged, the reason why."""
    incomplete = _incomplete(baseline, candidate, metric, knobs)
    if incomplete:
        return None, float("nan"), float("nan"), "; ".join(incomplete)
    diff, a, b = _compare(baseline, candidate, metric, knobs)
    return diff, a, b, "" if diff is not None else f"{metric}: too few steps to compare"


DRIFT_VERDICTS = {
    "down": "reduced beyond the effect of interest",
    "flat": "no reduction of interest (flat)",
    "up": "increased beyond the effect of interest",
    "inconclusive": "not checked: the runs cannot tell a reduction of interest from none",
}


def drift_reduced(baseline: Side, candidate: Side, knobs: Knobs) -> Answer:
    """Reduced when the difference's interval lies below -E (harness.judge.outcome, the ladder's
    rule), not merely below zero: a few percent either way is the runs' own spread. The evidence's
    `outcome` says which of up, down, flat or inconclusive it was; inconclusive is no answer."""
    question = "Does the candidate reduce train_rollout_logprob_abs_diff?"
    diff, a, b, why = _judged(baseline, candidate, ABS_DIFF, knobs)
    if diff is None:
        return Answer(question, False, why, {"outcome": "not judged"})
    band = question_effect(knobs, ab_question(candidate_name(*_first_pair(baseline, candidate), knobs), "drift-reduced"), a)
    judged = outcomes.judge_outcome(diff, band.value, knobs.threshold("bootstrap_confidence"))
    # What kind of change the candidate is decides what its outcome may be called (never "the
    # operator reduced drift" for a contract change or a planted fault).
    kind = candidate_kind(_replicates(baseline)[0].spec.flags, _replicates(candidate)[0].spec.flags, knobs)
    label = gate_label(kind, judged.direction)
    message = f"{label}: abs-diff {a:.4g} -> {b:.4g} ({(b - a) / a:+.0%}), {judged.describe()}: {DRIFT_VERDICTS[judged.direction]}"
    evidence = {
        "candidate_kind": kind.as_dict(),
        "gate_label": label,
        "baseline_mean": a,
        "candidate_mean": b,
        "ci": [judged.low, judged.high],
        "outcome": judged.direction,
        "effect_of_interest": judged.effect,
        "effect_rule": band.rule,
        "detectable": judged.detectable,
        "margin": _outcome_margin(judged, diff, baseline, candidate).as_dict(),
    }
    return Answer(question, judged.direction == "down", message, evidence)


def _sample(baseline: Side, candidate: Side, metric: str) -> dict:
    """What a paired A/B estimate of `metric` rests on: seeds a side (one pair a seed), the steps paired in all."""
    seeds = len(_replicates(baseline))
    steps = sum(min(len(a.series(metric)), len(b.series(metric))) for a, b in zip(_replicates(baseline), _replicates(candidate), strict=True))
    return {"seeds_per_side": [seeds, seeds], "paired_steps": steps}


def _outcome_margin(judged: outcomes.Outcome, diff: stats.DiffCI, baseline: Side, candidate: Side):
    """The margin of the observed outcome, from where its interval's edge would flip it (NaN for
    inconclusive: it has no side of a boundary)."""
    from harness.judge.margin import Margin

    if judged.direction not in ("up", "down", "flat"):
        return Margin(float("nan"), diff.diff, float("nan"), diff.se, judged.direction, _sample(baseline, candidate, ABS_DIFF))
    critical = interval_critical(judged.low, judged.high, diff.se)
    return outcome_margin(judged.direction, diff.diff, diff.se, judged.effect, _sample(baseline, candidate, ABS_DIFF), critical=critical)


def reward_preserved(baseline: Side, candidate: Side, knobs: Knobs) -> Answer:
    question = "Does it preserve or improve rollout/raw_reward?"
    diff, a, b, why = _judged(baseline, candidate, RAW_REWARD, knobs)
    if diff is None:
        return Answer(question, False, why)
    band = question_effect(knobs, ab_question(candidate_name(*_first_pair(baseline, candidate), knobs), "reward-preserved"), a)
    allowed = band.value
    passed = diff.low >= -allowed
    # Decided by the interval's low edge: it flips t(df) SE before the estimate reaches -allowed.
    margin = noninferiority_margin(
        diff.diff, diff.se, allowed, _sample(baseline, candidate, RAW_REWARD), critical=interval_critical(diff.low, diff.high, diff.se)
    )
    message = (
        f"reward {a:.3f} -> {b:.3f}, difference CI [{diff.low:+.3f}, {diff.high:+.3f}]; allowed drop "
        f"{allowed:.3f} ({band.rule}): " + ("preserved" if passed else "may have dropped") + f"; {margin.describe()}"
    )
    evidence = {"baseline_mean": a, "candidate_mean": b, "ci": [diff.low, diff.high], "outcome": "pass" if passed else "fail"}
    return Answer(question, passed, message, evidence | {"margin": margin.as_dict(), "allowed_drop": allowed, "allowed_drop_rule": band.rule})


# Step, rollout, log-prob recompute and weight-sync time: what an operator path can slow down.
TIMING_METRICS = ("perf/step_time", "perf/rollout_time", "perf/log_probs_time", "perf/update_weights_time")


def _aa_spread(values: list[float], knobs: Knobs) -> float:
    """The baseline's own relative noise: its two halves' relative difference, the larger end of
    that interval in magnitude (0 when the halves cannot be compared: the knob's floor applies)."""
    first, second = stats.split_halves(values)
    check = stats.aa_check(first, second, rel_tol=knobs.threshold("aa_max_rel_diff"), confidence=knobs.threshold("bootstrap_confidence"))
    if not np.isfinite(check.rel_ci_low):
        return 0.0
    return max(abs(check.rel_ci_low), abs(check.rel_ci_high))


def within_aa_band(baseline: Run, candidate: Run, metric: str, knobs: Knobs) -> Answer:
    """The candidate's mean of `metric` differs from the baseline's by no more than the baseline's
    own A/A spread (its two halves' relative difference, the larger end of that interval): a change
    the baseline's noise alone could make. Relative differences are symmetric (stats.aa_check)."""
    question = f"Is {metric} within the baseline's A/A band?"
    warmup = int(knobs.threshold("warmup_steps"))
    incomplete = _incomplete(baseline, candidate, metric, knobs)
    if incomplete:
        return Answer(question, False, "; ".join(incomplete))
    _, a = after_warmup(baseline.series(metric), warmup)
    _, b = after_warmup(candidate.series(metric), warmup)
    band = _aa_spread(a, knobs)
    check = stats.aa_check(a, b, rel_tol=knobs.threshold("aa_max_rel_diff"), confidence=knobs.threshold("bootstrap_confidence"))
    if not band or not np.isfinite(check.rel_diff):
        return Answer(question, False, f"{metric}: no A/A band or difference could be measured ({check.reason})")
    passed = abs(check.rel_diff) <= band
    message = f"{metric} {check.mean_a:.4g} -> {check.mean_b:.4g} ({check.rel_diff:+.1%}); the baseline's A/A band +/-{band:.1%} (its halves): " + (
        "within" if passed else "outside"
    )
    return Answer(
        question, passed, message, {"baseline_mean": check.mean_a, "candidate_mean": check.mean_b, "rel_diff": check.rel_diff, "aa_band": band}
    )


def timing_medians(run: Run, knobs: Knobs) -> dict[str, float]:
    """Median of each timing (TIMING_METRICS) after the warm-up, seconds; a timing not logged is left out."""
    warmup = int(knobs.threshold("warmup_steps"))
    medians = {}
    for metric in TIMING_METRICS:
        _, values = after_warmup(run.series(metric), warmup)
        finite = [v for v in values if np.isfinite(v)]
        if finite:
            medians[metric] = float(np.median(finite))
    return medians


def cost_note(baseline: Run, candidate: Run, knobs: Knobs) -> str:
    """One line for the summary: each timing's median, baseline -> candidate, and their ratio."""
    a, b = timing_medians(baseline, knobs), timing_medians(candidate, knobs)
    names = {"perf/step_time": "step", "perf/rollout_time": "rollout", "perf/log_probs_time": "recompute", "perf/update_weights_time": "weight sync"}
    parts = [f"{names[m]} {a[m]:.3g} s -> {b[m]:.3g} s ({b[m] / a[m]:.2f}x)" for m in TIMING_METRICS if m in a and m in b and a[m] > 0]
    return "median " + ", ".join(parts) if parts else "no timing logged by both sides"


def timings(baseline: Side, candidate: Side, knobs: Knobs) -> Answer:
    """The candidate is no slower than the baseline beyond the allowed slowdown: the upper end of
    the difference's interval at most max(ab_timing_max_rel_slowdown, the baseline's A/A spread)
    x the baseline's mean, for each timing. A timing either side does not log is not judged, and
    fails: an unmeasured slowdown is not an absent one."""
    question = "Does it improve rollout throughput or logprob recomputation time?"
    # Wall-clock is judged on the first pair (the judging seed): replicates share the machine in turn.
    baseline, candidate = _replicates(baseline)[0], _replicates(candidate)[0]
    warmup = int(knobs.threshold("warmup_steps"))
    knob = knobs.threshold("ab_timing_max_rel_slowdown")
    parts, evidence, failed, unmeasured = [], {}, [], []
    for metric in TIMING_METRICS:
        if not baseline.series(metric) or not candidate.series(metric):
            failed.append(metric)
            unmeasured.append(metric)
            parts.append(f"{metric}: not logged by the {'baseline' if not baseline.series(metric) else 'candidate'}")
            continue
        diff, a, b, why = _judged(baseline, candidate, metric, knobs)
        if diff is None:
            failed.append(metric)
            unmeasured.append(metric)
            parts.append(why)
            continue
        spread = _aa_spread(after_warmup(baseline.series(metric), warmup)[1], knobs)
        allowed_rel = max(knob, spread)
        allowed = allowed_rel * abs(a)
        ok = diff.high <= allowed
        verdict = "faster" if diff.high < 0 else ("within the allowed slowdown" if ok else "slower")
        if not ok:
            failed.append(metric)
        evidence[metric] = {
            "baseline": a,
            "candidate": b,
            "ci": [diff.low, diff.high],
            "aa_spread": spread,
            "allowed_rel_slowdown": allowed_rel,
            "passed": ok,
        }
        parts.append(
            f"{metric} {a:.3g}s -> {b:.3g}s (CI [{diff.low:+.3g}, {diff.high:+.3g}]; allowed +{allowed:.3g}s = "
            f"max(thresholds.ab_timing_max_rel_slowdown {knob:.0%}, A/A spread {spread:.0%}) of the baseline): {verdict}"
        )
    # Which timings could not be judged at all (not logged, or NaN/missing steps): never a pass.
    evidence["unmeasured"] = unmeasured
    return Answer(question, not failed, "; ".join(parts), evidence)


def mode_consistency(pairs: dict[str, tuple[Side, Side]], knobs: Knobs) -> Answer:
    """pairs: mode -> (baseline, candidate), each one run or the mode's pairs at its seeds (knobs/ab.yaml
    mode_pairs), judged over the pairs as the A/B's questions are. The candidate's effect on abs-diff gets the ladder's
    three outcomes in each mode (harness.judge.outcome: up, down, flat or inconclusive against the
    minimum effect of interest E of the baseline's mean, Holm across the two modes), and the modes
    are compared by outcome, not by whether an interval happens to include zero:
      consistent    both flat, or both up (or both down) with relative changes within
                    thresholds.ab_mode_consistency_max_rel_gap of each other;
      inconsistent  one mode decides a direction the other contradicts (up against flat or down);
      inconclusive  otherwise: a mode cannot tell an effect from none, so nothing is shown either way
                    (reported with the smallest effect each mode could have detected; not a pass).
    A candidate with no effect of interest is flat in both modes, whatever noise moves a mean by
    a few percent: the two modes sample trajectories of their own, so their small deltas differ
    (an interval excluding zero at +11% in one mode and -4% in the other failed the earlier rule
    in CI, for a candidate that changes nothing measurable)."""
    question = "Does it behave consistently between colocate and non-colocate modes?"
    diffs, effects = {}, {}
    for mode, (baseline, candidate) in pairs.items():
        diff, a, b, why = _judged(baseline, candidate, ABS_DIFF, knobs)
        if diff is None:
            return Answer(question, False, f"{mode}: {why}", {"outcome": "not judged"})
        diffs[mode] = diff
        band = question_effect(knobs, mode_question(mode), a)
        effects[mode] = {
            "baseline_mean": a,
            "candidate_mean": b,
            "relative_change": (b - a) / a,
            "effect_of_interest": band.value,
            "effect_rule": band.rule,
        }
    alpha = 1.0 - knobs.threshold("bootstrap_confidence")
    levels = outcomes.holm_levels({mode: outcomes.decision_p_value(diffs[mode], effects[mode]["effect_of_interest"]) for mode in diffs}, alpha)
    judged = {
        mode: outcomes.judge_outcome(diffs[mode], effects[mode]["effect_of_interest"], levels[mode].confidence, levels[mode].reached)
        for mode in diffs
    }
    for mode, outcome in judged.items():
        effects[mode].update(
            direction=outcome.direction,
            ci=[outcome.low, outcome.high],
            confidence=outcome.confidence,
            detectable=outcome.detectable,
            family_size=len(judged),
        )
    # The answer's margin: the nearer of the two modes' outcomes to its boundary.
    margins = [_outcome_margin(judged[mode], diffs[mode], *pairs[mode]).as_dict() for mode in judged]
    margin = min(margins, key=lambda m: m["se_units"] if m["se_units"] == m["se_units"] else float("-inf"))
    directions = {o.direction for o in judged.values()}
    values = [e["relative_change"] for e in effects.values()]
    gap = abs(values[0] - values[1])
    allowed = knobs.threshold("ab_mode_consistency_max_rel_gap") * max(abs(v) for v in values)
    if directions == {"flat"}:
        verdict, why = "consistent", "no effect of interest in either mode"
    elif len(directions) == 1 and directions <= {"up", "down"}:
        verdict = "consistent" if gap <= allowed else "inconsistent"
        why = f"{directions.pop()} in both; gap {gap:.0%} vs allowed {allowed:.0%} (thresholds.ab_mode_consistency_max_rel_gap)"
    elif len(directions - {"inconclusive"}) > 1:  # two different decisions, at least one a direction
        verdict, why = "inconsistent", "one mode decides a direction the other contradicts"
    else:
        verdict, why = "inconclusive", "a mode cannot tell an effect from none: not checked"
    message = "; ".join(f"{mode}: {effects[mode]['relative_change']:+.0%}, {judged[mode].describe()}" for mode in judged) + f". {verdict}: {why}"
    return Answer(question, verdict == "consistent", message, {"outcome": verdict, **effects, "margin": margin})


QUESTIONS: dict[str, Callable[[Run, Run, Knobs], Answer]] = {
    "drift-reduced": drift_reduced,
    "reward-preserved": reward_preserved,
    "timings": timings,
}
