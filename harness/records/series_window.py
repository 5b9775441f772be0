"""A metric series' finite steps, and the steps after warm-up: what every verdict and probe reads
from a run's series (harness.judge, harness.attribution, the report)."""

from __future__ import annotations

import math


def finite_values(series: list[tuple[int, object]]) -> tuple[list[int], list[float], list[int]]:
    """Split a metric series into (steps, values) of finite numbers and the steps that were not."""
    steps, values, bad = [], [], []
    for step, value in series:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(step)
            values.append(float(value))
        else:
            bad.append(step)
    return steps, values, bad


def after_warmup(series: list[tuple[int, object]], warmup: int) -> tuple[list[int], list[float]]:
    steps, values, _ = finite_values(series)
    if not steps:
        return [], []
    first = min(steps) + warmup
    kept = [(s, v) for s, v in zip(steps, values) if s >= first]
    return [s for s, _ in kept], [v for _, v in kept]
