"""The seed's readiness criteria: their evidence gathered, then decided by harness.judge.readiness.

`readiness_answer(criterion, knobs, runs, mode, probes)` is the one call both front ends make (the
Session's `readiness` check, which pytest's tests/acceptance/test_readiness.py and `python -m harness
baseline` ask): only what the criterion needs is gathered (harness.judge.readiness.NEEDS), from runs
the main job makes anyway (the P1 ladder, the drift budgets, the P3 A/B pair), so the criteria add
re-judging, not runs. A run the source cannot give fails the check (SpecError, as for every check);
evidence a found run cannot provide is named in `problems`, and its criterion is then not checked,
never met.
"""

from __future__ import annotations

from pathlib import Path

from harness.experiment.evidence import acceptance_context, budget_runs, contract_problems, replicate_sets, rung_difference
from harness.judge import readiness as checks
from harness.judge import stats
from harness.judge.acceptance import record_is_complete
from harness.judge.expectations import bound_findings
from harness.judge.verdict import Verdict, after_warmup
from harness.records.metric_names import ABS_DIFF
from harness.spec import Knobs
from harness.spec.resolve import resolve

NEAR_ALIGNED = "near-aligned"


def _near_aligned(knobs: Knobs, fetch, replicates: int) -> list[checks.SeedFigures]:
    rung = knobs.rungs[NEAR_ALIGNED]
    (runs,) = replicate_sets([NEAR_ALIGNED], fetch, replicates)
    warmup, confidence = int(knobs.threshold("warmup_steps")), knobs.threshold("bootstrap_confidence")
    out = []
    for run in runs:
        steps, values = after_warmup(run.series(ABS_DIFF), warmup)
        if len(values) < 3:
            out.append(
                checks.SeedFigures(
                    int(run.spec.flag("seed", 0)),
                    run.id,
                    (0, 0, len(values)),
                    float("nan"),
                    (float("nan"),) * 2,
                    float("nan"),
                    float("nan"),
                    bound_findings(rung, run, knobs, side=runs),
                )
            )
            continue
        summary = stats.summarize(values, warmup=0, steps=steps)
        low, high = stats.block_bootstrap_mean_ci(values, confidence=confidence)
        mean = summary.mean
        out.append(
            checks.SeedFigures(
                seed=int(run.spec.flag("seed", 0)),
                run=run.id,
                steps=(steps[0], steps[-1], len(steps)),
                mean=mean,
                ci=(low, high),
                rel_halfwidth=(high - low) / 2 / mean if mean else float("inf"),
                rel_trend=abs(summary.slope) * (steps[-1] - steps[0]) / mean if mean else float("inf"),
                findings=bound_findings(rung, run, knobs, side=runs),
            )
        )
    return out


def _knob_deltas(knobs: Knobs, stage: str, mode: str, backend: str, fetch, replicates: int) -> list[checks.KnobDelta]:
    """Each rung at the stage whose parent runs there: the knobs its resolved flags change, and its delta."""
    table = knobs.readiness
    out = []
    for rung in knobs.rungs.values():
        if rung.parent is None or stage not in rung.stages or stage not in knobs.rungs[rung.parent].stages or backend not in rung.backends:
            continue
        mine, theirs = (resolve(knobs, stage, r, mode, backend).flags for r in (rung.id, rung.parent))
        changed = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        grouped: dict[str, list[str]] = {}
        unknown = []
        for flag in changed:
            knob = table.knob_of(flag)
            (grouped.setdefault(knob, []) if knob else unknown).append(flag)
        delta, why = None, ""
        judged = rung_difference(rung, knobs, fetch, replicates)
        if judged is None:
            why = f"{rung.id} or {rung.parent}: a run falls short of the completeness knobs"
        else:
            diff, _ = judged
            delta = {"diff": diff.diff, "low": diff.low, "high": diff.high, "seeds": replicates}
        out.append(checks.KnobDelta(rung.id, rung.parent, grouped, unknown, delta, why))
    return out


def _budgets(knobs: Knobs, fetch, probes) -> dict[str, dict]:
    from harness.judge.budget import RungBudget

    rungs = knobs.levers.budget.rungs
    # every rung's budget at once: their scorers run side by side (Probes.drift_budgets)
    budgets = probes.drift_budgets([(rung_id, budget_runs(rung_id, knobs, fetch)) for rung_id in rungs])
    return {
        rung_id: budget.as_dict() if isinstance(budget, RungBudget) else {"not_measured": getattr(budget, "reason", str(budget))}
        for rung_id, budget in zip(rungs, budgets)
    }


def _bench(knobs: Knobs, runs, mode: str) -> dict:
    """The candidate on the captured tensors of the recommended baseline's run at the A/B stage."""
    from harness.attribution.linear_bench import bench_capture

    chosen = knobs.candidate
    pair = chosen.pairs[next(iter(chosen.pairs))]
    run = runs(pair.stage, pair.rung, mode)
    captures = sorted(
        Path(run.path / "dumps").glob("capture_*.pt"), key=lambda p: int(p.stem.split("_")[1]) if p.stem.split("_")[1].isdigit() else 1 << 30
    )
    if not captures:
        raise LookupError(f"run {run.id} ({pair.rung} at {pair.stage}) kept no capture bundle (dumps/capture_N.pt)")
    bench = bench_capture(captures[0], chosen.operator).as_dict()
    bench["source"] = f"{run.id}/dumps/{captures[0].name}"  # the run's, not this machine's path: the record travels
    return bench


def _final_ab(knobs: Knobs, runs, mode: str) -> dict:
    chosen = knobs.ab.pair
    fetch = runs.fetcher(chosen.stage, mode)
    baseline, candidate = fetch(chosen.baseline), fetch(chosen.candidate)
    records, missing = {}, {}
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        verdict: Verdict = record_is_complete(acceptance_context(run, knobs, fetch, "record_is_complete"))
        records[side] = [] if verdict.passed else [verdict.message]
        missing[side] = sorted(name for name, value in verdict.evidence.items() if not name.endswith("_source") and not value)
    return {
        "pair": f"{chosen.baseline} vs {chosen.candidate} at {chosen.stage}",
        "baseline": baseline.id,
        "candidate": candidate.id,
        "contract": contract_problems(baseline, candidate, knobs),
        "records": records,
        "missing": missing,
    }


def gather(check: str, knobs: Knobs, runs, mode: str, probes) -> checks.ReadinessEvidence:
    """What `check` needs (harness.judge.readiness.NEEDS), from `runs` (RunSource's face)."""
    table = knobs.readiness
    stage = table.stage
    replicates = knobs.stages[stage].replicate_count(runs.backend)
    fetch = runs.fetcher(stage, mode)
    ev = checks.ReadinessEvidence(mismatch_knobs=[k for k, knob in table.knobs.items() if knob.kind == "mismatch"])
    ev.candidate = knobs.candidate.operator if knobs.candidate else ""
    gatherers = {
        "near_aligned": lambda: _near_aligned(knobs, fetch, replicates),
        "knob_deltas": lambda: _knob_deltas(knobs, stage, mode, runs.backend, fetch, replicates),
        "budgets": lambda: _budgets(knobs, runs.fetcher(knobs.levers.budget.stage, mode), probes),
        "bench": lambda: _bench(knobs, runs, mode),
        "final_ab": lambda: _final_ab(knobs, runs, mode),
    }
    for need in checks.NEEDS[check]:
        if need == "budgets" and knobs.levers is None:
            ev.problems[need] = "knobs/ has no levers.yaml: no drift budget"
            continue
        if need == "bench" and knobs.candidate is None:
            ev.problems[need] = "knobs/ has no candidate.yaml: no candidate operator to bench"
            continue
        # A run the source cannot give fails the check as every other check's does (its one line
        # says which run); evidence a found run cannot provide (no capture, a budget the judge cannot
        # compute) leaves the criterion not checked, with the reason.
        try:
            setattr(ev, need, gatherers[need]())
        except (LookupError, OSError, ValueError) as err:
            ev.problems[need] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return ev


def readiness_answer(criterion, knobs: Knobs, runs, mode: str, probes) -> Verdict:
    """One readiness criterion decided: its evidence gathered, then its check."""
    return checks.CHECKS[criterion.check](gather(criterion.check, knobs, runs, mode, probes), knobs)
