"""The seed's readiness criteria for Blackwell operator work, as checks: typed evidence in, a verdict out.

knobs/readiness.yaml names them; each takes the evidence harness.experiment.readiness gathered (the
runs' figures, the resolved specs' differences, the drift budgets, the candidate's bench on captured
tensors, the final A/B's contract) and returns a Verdict whose evidence carries ``verdict``: met,
not met, or not checked (a check that could not run is never met). This module opens no file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.judge.verdict import Verdict
from harness.spec import Knobs
from harness.spec.readiness_file import MET, NOT_CHECKED, NOT_MET


@dataclass
class SeedFigures:
    """One near-aligned run's abs-diff after the warm-up, and what its bounds said."""

    seed: int
    run: str
    steps: tuple[int, int, int]  # first, last, count
    mean: float
    ci: tuple[float, float]
    rel_halfwidth: float
    rel_trend: float
    findings: list[str]  # harness.judge.expectations.bound_findings with the side over every seed: empty when every bound holds


@dataclass
class KnobDelta:
    """One rung against its parent at the readiness stage: the knobs its resolved flags change, and its delta."""

    rung: str
    parent: str
    knobs: dict[str, list[str]]  # knob -> the flags of it that differ
    unknown: list[str]  # differing flags no knob of readiness.yaml lists
    delta: dict | None = None  # {"diff", "low", "high", "seeds"}: rung minus parent, mean abs-diff; None: not measured
    why: str = ""  # why the delta was not measured


@dataclass
class ReadinessEvidence:
    """Everything the criteria read; each field None where its gatherer could not produce it (with `problems`)."""

    near_aligned: list[SeedFigures] | None = None
    knob_deltas: list[KnobDelta] | None = None
    mismatch_knobs: list[str] = field(default_factory=list)
    budgets: dict[str, dict] | None = None  # rung -> RungBudget.as_dict() or {"not_measured": why}
    bench: dict | None = None  # harness.attribution.linear_bench.LinearBench.as_dict()
    candidate: str = ""
    final_ab: dict | None = None  # {"pair": .., "contract": [problems], "records": {side: [problems]}}
    problems: dict[str, str] = field(default_factory=dict)  # evidence name -> why it is missing


def _verdict(state: str, message: str, evidence: dict) -> Verdict:
    return Verdict(state == MET, f"{state}: {message}", {"verdict": state, **evidence})


def near_aligned_low_and_stable(ev: ReadinessEvidence, knobs: Knobs) -> Verdict:
    """Met when every near-aligned seed's run keeps the rung's bounds (low: mean; stable: its trend over the
    run, and the side's interval over every seed, relative half-width), the same bounds the ladder holds it to."""
    if not ev.near_aligned:
        return _verdict(NOT_CHECKED, ev.problems.get("near_aligned", "no near-aligned run"), {})
    rows = [
        {
            "seed": s.seed,
            "run": s.run,
            "steps": list(s.steps),
            "mean": s.mean,
            "ci": list(s.ci),
            "rel_halfwidth": s.rel_halfwidth,
            "rel_trend": s.rel_trend,
        }
        for s in ev.near_aligned
    ]
    means = [s.mean for s in ev.near_aligned]
    spread = (max(means) - min(means)) / (sum(means) / len(means))
    shown = "; ".join(
        f"seed {s.seed}: {s.mean:.3g} [{s.ci[0]:.3g}, {s.ci[1]:.3g}], trend {s.rel_trend:.0%} over steps {s.steps[0]}-{s.steps[1]}"
        for s in ev.near_aligned
    )
    limits = {
        name: knobs.threshold(name) for name in ("near_aligned_max_abs_diff", "near_aligned_max_rel_side_ci_halfwidth", "near_aligned_max_rel_trend")
    }
    evidence = {"seeds": rows, "seed_range_over_mean": spread, "limits": limits}
    # A side bound (over every seed) is in each seed's findings: said once.
    broken = list(dict.fromkeys(finding for s in ev.near_aligned for finding in s.findings))
    if broken:
        return _verdict(NOT_MET, "; ".join(broken[:3]), evidence)
    return _verdict(MET, f"{len(rows)} seeds within every bound ({shown}); the seeds' means span {spread:.0%} of their mean", evidence)


def each_knob_isolated(ev: ReadinessEvidence, knobs: Knobs) -> Verdict:
    """Met when every mismatch knob of readiness.yaml has a rung that differs from its parent by that
    knob alone on the resolved specs, with its delta measured, and no rung changes a flag no knob lists."""
    if ev.knob_deltas is None:
        return _verdict(NOT_CHECKED, ev.problems.get("knob_deltas", "the ladder's specs could not be resolved"), {})
    isolating: dict[str, list[KnobDelta]] = {}
    for d in ev.knob_deltas:
        if len(d.knobs) == 1 and not d.unknown:
            isolating.setdefault(next(iter(d.knobs)), []).append(d)
    rows = [
        {
            "rung": d.rung,
            "parent": d.parent,
            "knobs": d.knobs,
            "unknown_flags": d.unknown,
            "isolates": len(d.knobs) == 1 and not d.unknown,
            "delta": d.delta,
            "why": d.why,
        }
        for d in ev.knob_deltas
    ]
    evidence = {"rungs": rows, "mismatch_knobs": ev.mismatch_knobs}
    unknown = [f"{d.rung} changes {', '.join(d.unknown)} (no knob of readiness.yaml)" for d in ev.knob_deltas if d.unknown]
    missing = [k for k in ev.mismatch_knobs if k not in isolating]
    unmeasured = [k for k in ev.mismatch_knobs if k in isolating and not any(d.delta for d in isolating[k])]
    if unknown or missing:
        return _verdict(NOT_MET, "; ".join(unknown + [f"no rung changes {k} alone" for k in missing]), evidence)
    if unmeasured:
        whys = [d.why for k in unmeasured for d in isolating[k]]
        return _verdict(NOT_CHECKED, f"the isolating rung's delta was not measured for {', '.join(unmeasured)} ({whys[0]})", evidence)

    def shown(knob: str) -> str:
        d = next(d for d in isolating[knob] if d.delta)
        return f"{knob}: {d.rung} - {d.parent} {d.delta['diff']:+.3g} [{d.delta['low']:+.3g}, {d.delta['high']:+.3g}]"

    return _verdict(MET, "each mismatch knob has a rung that changes it alone: " + "; ".join(shown(k) for k in ev.mismatch_knobs), evidence)


def drift_localised(ev: ReadinessEvidence, knobs: Knobs) -> Verdict:
    """Met when some budget rung's drift is localised to an operator boundary by intervention
    (harness.judge.budget: a contract lever is never an answer); otherwise the budgets' numbers say why not."""
    if not ev.budgets:
        return _verdict(NOT_CHECKED, ev.problems.get("budgets", "no drift budget measured"), {})
    measured = {rung: b for rung, b in ev.budgets.items() if "verdict" in b}
    evidence = {"budgets": {rung: _budget_summary(b) for rung, b in ev.budgets.items()}}
    localised = [(rung, b) for rung, b in measured.items() if b["verdict"] == "localised"]
    if localised:
        return _verdict(MET, "; ".join(f"{rung}: {b['reason']}" for rung, b in localised), evidence)
    if not measured:
        return _verdict(NOT_CHECKED, "; ".join(f"{rung}: {b.get('not_measured')}" for rung, b in ev.budgets.items()), evidence)
    return _verdict(NOT_MET, "none is: " + "; ".join(f"{rung}: {b['reason']}" for rung, b in measured.items()), evidence)


def _budget_summary(budget: dict) -> dict:
    if "verdict" not in budget:
        return {"not_measured": budget.get("not_measured")}
    operators = [row for row in budget["levers"] if row["kind"] == "operator"]
    top = max(operators, key=lambda row: row["add_one"]["value"]) if operators else None
    return {
        "verdict": budget["verdict"],
        "boundary": budget["boundary"],
        "drift": budget["drift"],
        "seeds": budget["seeds"],
        "largest_add_one": None if top is None else {"lever": top["lever"], **top["add_one"]},
        "reason": budget["reason"],
    }


def candidate_testable_with_fixed_tensors(ev: ReadinessEvidence, knobs: Knobs) -> Verdict:
    """Met when the candidate ran on the boundary's captured tensors beside the natives and the
    reference, keeps its contract there (bitwise batch invariant; its error against the fp64 reference
    on the held weight within its contract's bound: one output rounding and an fp32 running sum over
    K), and leaves the boundary's train-rollout gap at zero with both sides batching as they do."""
    if not ev.bench:
        return _verdict(NOT_CHECKED, ev.problems.get("bench", "no bench on captured tensors"), {})
    bench = ev.bench
    if bench["problems"]:
        return _verdict(NOT_CHECKED, bench["problems"][0], {"bench": bench})
    rows = [row for row in bench["rows"] if row["operator"] == ev.candidate]
    if not rows:
        return _verdict(NOT_CHECKED, f"the bench has no row of {ev.candidate!r}", {"bench": bench})
    differing = sum(row["invariance_differing"] for row in rows)
    checked = sum(row["invariance_rows"] for row in rows)
    worst = max(row["max_ulps"] for row in rows)
    beyond = max(row["max_bound_ratio"] for row in rows)
    gap = max(g["max"] for g in bench["candidate_gap"].values())
    native = max(g["max"] for g in bench["native_gap"].values())
    summary = (
        f"{ev.candidate} on {len(rows)} linears of {bench['source']} ({rows[0]['rows']} rows each): "
        f"{differing} of {checked} rows batch-variant, at most {worst:.2g} bf16 ulp from the fp64 reference "
        f"({beyond:.2g}x its contract's bound), "
        f"train-rollout gap {gap:.3g} (native {native:.3g})"
    )
    evidence = {"bench": bench}
    problems = []
    if differing:
        problems.append(f"{differing} rows differ alone or in another batch")
    if beyond > 1.0:
        problems.append(f"an error {beyond:.3g} times its contract's bound")
    if gap > 0:
        problems.append(f"a train-rollout gap of {gap:.3g} with both sides running it")
    if problems:
        return _verdict(NOT_MET, summary + ": " + "; ".join(problems), evidence)
    return _verdict(MET, summary, evidence)


def final_ab_same_contract(ev: ReadinessEvidence, knobs: Knobs) -> Verdict:
    """Met when the final A/B's baseline and candidate are one workload (harness.judge.ab.contract_problems:
    flags, prompts, commit, image, hardware, the candidate's execution) under one metadata contract: each
    field of the seed's record (harness.judge.acceptance.record_is_complete) recorded on one side is
    recorded on the other. A field both lack is said, not counted: whether a record is complete is the
    acceptance criterion's question (on the embedded backend the image is reported in cluster-record)."""
    if not ev.final_ab:
        return _verdict(NOT_CHECKED, ev.problems.get("final_ab", "the final A/B's runs were not found"), {})
    ab = ev.final_ab
    missing = ab.get("missing", {})
    lacks = {side: set(fields) for side, fields in missing.items()}
    both = set.intersection(*lacks.values()) if lacks else set()
    problems = list(ab["contract"]) + [
        f"{side} lacks {', '.join(sorted(fields - both))}, which the other side's record carries"
        for side, fields in sorted(lacks.items())
        if fields - both
    ]
    if problems:
        return _verdict(NOT_MET, "; ".join(problems[:4]), {"final_ab": ab})
    shared = f"; neither record names: {', '.join(sorted(both))} (the acceptance criterion's record check)" if both else ", both records complete"
    return _verdict(MET, f"{ab['pair']}: same workload and metadata ({ab['baseline']} vs {ab['candidate']}){shared}", {"final_ab": ab})


CHECKS: dict[str, Callable[[ReadinessEvidence, Knobs], Verdict]] = {
    "near_aligned_low_and_stable": near_aligned_low_and_stable,
    "each_knob_isolated": each_knob_isolated,
    "drift_localised": drift_localised,
    "candidate_testable_with_fixed_tensors": candidate_testable_with_fixed_tensors,
    "final_ab_same_contract": final_ab_same_contract,
}
# What each check needs gathered (harness.experiment.readiness gathers only these).
NEEDS = {
    "near_aligned_low_and_stable": ("near_aligned",),
    "each_knob_isolated": ("knob_deltas",),
    "drift_localised": ("budgets",),
    "candidate_testable_with_fixed_tensors": ("bench",),
    "final_ab_same_contract": ("final_ab",),
}
