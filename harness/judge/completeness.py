"""Is a run's metric series complete enough to judge? Missing and non-finite steps are named.

A step without a finite value is a rollout whose figure was never compared; averaging the rest
silently would judge a sample that leaves out exactly the pathological steps. The expected steps
are 0 .. num-rollout - 1 when the run's spec says num-rollout, else the steps the run logged.
"""

from __future__ import annotations

import math

from harness.records.runload import Run
from harness.spec import Knobs
from harness.spec.flag_read import int_flag


def expected_steps(run: Run, logged: list[int]) -> list[int]:
    count = int_flag(run.spec.flags, "num-rollout")
    return list(range(count)) if count is not None else sorted(set(logged))


def _shorten(steps: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f", ... ({len(steps) - limit} more)" if len(steps) > limit else "")


def series_problems(run: Run, metric: str, knobs: Knobs, label: str) -> list[str]:
    """One line per way the series falls short of thresholds.min_judged_steps and
    thresholds.max_missing_steps; empty when it may be judged."""
    series = run.series(metric)
    logged = [step for step, _ in series]
    bad = [step for step, value in series if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))]
    absent = sorted(set(expected_steps(run, logged)) - set(logged))
    missing = sorted(set(bad) | set(absent))
    warmup = int(knobs.threshold("warmup_steps"))
    first = (min(logged) if logged else 0) + warmup
    judged = [s for s, _ in series if s >= first and s not in set(bad)]
    problems = []
    max_missing = int(knobs.threshold("max_missing_steps"))
    if len(missing) > max_missing:
        parts = []
        if bad:
            parts.append(f"non-finite at steps {_shorten(sorted(bad))}")
        if absent:
            parts.append(f"not logged at steps {_shorten(absent)}")
        problems.append(
            f"{label} (run {run.id}): {metric} has {len(missing)} missing step(s) > thresholds.max_missing_steps {max_missing}: " + "; ".join(parts)
        )
    min_judged = int(knobs.threshold("min_judged_steps"))
    if len(judged) < min_judged:
        problems.append(
            f"{label} (run {run.id}): {metric} has {len(judged)} finite step(s) after the {warmup}-step warm-up "
            f"< thresholds.min_judged_steps {min_judged}"
        )
    return problems
