"""Exactly zero at every step: the judge of a rung whose drift must vanish, not shrink.

A rung's ``expect.exactly_zero_every_step`` names metrics (the true-on-policy rung: the abs-diff
and ppo_kl) that must read 0.0 at every step the run should have logged: no warm-up, no missing
step, no tolerance. A NaN, an absent step or the smallest non-zero value each fail, and the
finding names the first offending step with its value, so a lever that stopped holding is seen at
the step where it broke. A zero the parent shows as well says nothing the rung did (a metric that is
0.0 in every run of the backend cannot see a difference): given the parent's run, that is a finding too.
"""

from __future__ import annotations

import math

from harness.judge.completeness import expected_steps
from harness.records.runload import Run
from harness.spec.schema import Rung


def exactly_zero_findings(rung: Rung, run: Run, parent: Run | None = None) -> list[str]:
    """One line per named metric that is not exactly 0.0 at every expected step, or (with the parent's
    run) that is 0.0 at every step of the parent too; empty: all hold."""
    findings = []
    where = f"ladder/{rung.id}.yaml expect.exactly_zero_every_step"
    for name in rung.expect.exactly_zero_every_step:
        if parent is not None:
            parent_values = [value for _, value in parent.series(name)]
            if parent_values and all(_is_exact_zero(v) for v in parent_values):
                findings.append(
                    f"{rung.id}: {name} is exactly 0.0 at every step of the parent's run {parent.id} as well: a zero here cannot "
                    f"tell the rung from its parent ({where})"
                )
        series = run.series(name)
        logged = {step: value for step, value in series}
        expected = expected_steps(run, list(logged))
        if not expected:
            findings.append(f"{rung.id}: {name} was never logged (run {run.id}); expected exactly 0.0 at every step ({where})")
            continue
        absent = [step for step in expected if step not in logged]
        nonzero = [(step, logged[step]) for step in expected if step in logged and not _is_exact_zero(logged[step])]
        if absent:
            findings.append(
                f"{rung.id}: {name} not logged at {len(absent)} of {len(expected)} steps (first: step {absent[0]}), run {run.id} ({where})"
            )
        if nonzero:
            step, value = nonzero[0]
            largest = max((abs(v) for _, v in nonzero if isinstance(v, (int, float)) and math.isfinite(v)), default=float("nan"))
            findings.append(
                f"{rung.id}: {name} is not exactly 0.0 at {len(nonzero)} of {len(expected)} steps: first step {step} = {value!r}, "
                f"largest |value| {largest:.3g}, run {run.id} ({where})"
            )
    return findings


def _is_exact_zero(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0.0
