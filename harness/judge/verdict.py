"""What a check returns: passed or not, one message a reviewer can act on, and its evidence.

Messages name the step, the value and the threshold (by its knobs/ name), so a failing test reads
as a finding rather than an assertion error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Verdict:
    passed: bool
    message: str
    evidence: dict = field(default_factory=dict)


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
