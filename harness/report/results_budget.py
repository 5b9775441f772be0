"""docs/results.md's drift-budget section: where the budget rungs' drift lives on the design seeds
(knobs/levers.yaml's measured part, written by tools/budget_design.py) and which planted fault each
method localises, by size (reports/controls/budget/control_sizes.json, tools/control_sizes.py
--budget: the drift budget beside the envelope table on the same runs).

The files carry more than the page reads; the models type the keys it reads and leave the rest open.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.report.results_format import num, record_line, signed
from harness.report.results_records import ResultsRecordError, problem_line, read_json

LEVERS = Path("knobs") / "levers.yaml"
BUDGET_CONTROLS = Path("reports") / "controls" / "budget" / "control_sizes.json"
# tools/control_sizes.py --own-drift: each planted fault's own drift budgeted (its clean twin differenced away)
OWN_DRIFT_CONTROLS = Path("reports") / "controls" / "own-drift" / "control_sizes.json"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class DesignRung(_Open):
    verdict: str
    boundary: str | None = None
    margin_se: float | None = None
    drift: float
    residual_all_levers: float
    add_one: dict[str, list[float]]


class Design(_Open):
    date: str
    commit: str = "not recorded"
    machine: str
    seeds: list[int]
    rungs: dict[str, DesignRung]


class Budget(_Open):
    verdict: str
    boundary: str | None = None
    planted_lever: str | None = None
    planted_add_one: list[float] | None = None
    planted_margin_se: float | None = None
    reason: str | None = None  # why not measured
    replay: dict | None = None  # the re-score's check; an own-drift budget's holds tokens_moved


class ControlRun(_Open):
    rung: str
    control: str
    size: str
    planted: str | None = None
    localised: str | None = None
    date: str
    commit: str
    machine: str
    seed: int | None = None
    num_rollout: int | None = None
    budget: Budget | None = None
    own_drift: Budget | None = None


def _validated(model: type[BaseModel], data: object, shown: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ResultsRecordError(problem_line(shown, err)) from None


def _share(values: list[float] | None) -> str:
    return "—" if not values else f"{values[0]:+.1%} [{values[1]:+.1%}, {values[2]:+.1%}]"


def _design(root: Path) -> list[str]:
    from harness.spec import SpecError, load_knobs

    shown = str(LEVERS)
    try:
        levers = load_knobs(root / "knobs").levers
    except SpecError as err:
        raise ResultsRecordError(err.problems[0]) from None
    if levers is None or not levers.measured:
        return [f"{shown}: no measured part (tools/budget_design.py --write on the design seeds)."]
    design = _validated(Design, levers.measured, f"{shown}: measured")
    lines = [
        record_line(shown, design.date, design.commit, design.machine) + f"; design seeds {', '.join(map(str, design.seeds))}.",
        "",
        "| rung | drift | answer | nearest lever, add-one share [95%] | SE from the share (past it / below it) | all operator levers leave |",
        "|---|---|---|---|---|---|",
    ]
    for rung, m in design.rungs.items():
        operators = {k: v for k, v in m.add_one.items() if k in levers.operator_levers()}
        nearest = max(operators, key=lambda k: operators[k][0])
        answer = m.verdict + (f" to {m.boundary}" if m.boundary else "")
        lines.append(
            f"| {rung} | {num(m.drift)} | {answer} | {nearest} {_share(operators[nearest])} | {signed(m.margin_se, 1)} | {m.residual_all_levers:.1%} |"
        )
    return lines


def _runs_line(shown: str, runs: list[ControlRun]) -> str:
    """The record line of a set of control runs: dates, commits, machines, seeds and rollouts."""
    joined = lambda values, sep=", ": sep.join(sorted({str(v) for v in values}))  # noqa: E731
    return (
        record_line(shown, joined(r.date for r in runs), joined(r.commit for r in runs), joined((r.machine for r in runs), "; "))
        + f"; {len(runs)} runs, seed {joined(r.seed for r in runs)}, {joined(r.num_rollout for r in runs)} rollouts each."
    )


def _controls(root: Path) -> list[str]:
    shown = str(BUDGET_CONTROLS)
    data = read_json(root / shown, shown)
    runs = [_validated(ControlRun, run, f"{shown}: {key}") for key, run in data.items()]
    runs = [run for run in runs if run.budget is not None]
    lines = [
        _runs_line(shown, runs),
        "",
        "| rung | control | lever | by intervention: localised | not (the lever's add-one share) | by the envelope table: localised |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[ControlRun]] = {}
    for run in runs:
        if run.control != "none":
            groups.setdefault((run.rung, run.control), []).append(run)
    for (rung, control), members in groups.items():
        members = sorted(members, key=lambda r: (not r.size.startswith("7"), r.size))
        lever = members[0].budget.planted_lever or "—"
        found = [r.size for r in members if r.budget.verdict == "localised" and r.budget.boundary == lever]
        missed = [f"{r.size} ({_share(r.budget.planted_add_one)})" for r in members if r.size not in found]
        table = [r.size for r in members if r.planted and r.localised == r.planted]
        lines.append(f"| {rung} | {control} | {lever} | {', '.join(found) or '—'} | {'; '.join(missed) or '—'} | {', '.join(table) or '—'} |")
    return lines


def _own_drift(root: Path) -> list[str]:
    shown = str(OWN_DRIFT_CONTROLS)
    if not (root / shown).is_file():
        return [f"No committed record (`{shown}`): `make controls` writes it (tools/control_sizes.py --own-drift)."]
    data = read_json(root / shown, shown)
    runs = [_validated(ControlRun, run, f"{shown}: {key}") for key, run in data.items()]
    runs = sorted((r for r in runs if r.own_drift is not None), key=lambda r: (r.rung, r.control, r.size, r.num_rollout or 0))
    lines = [
        _runs_line(shown, runs),
        "",
        "| rung | control | size | rollouts | tokens it moved | lever | its share of the fault's own drift [95%] | SE from the share | answer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        b = r.own_drift
        answer = b.verdict + (f" to {b.boundary}" if b.boundary else "") + (f": {b.reason}" if b.reason else "")
        moved = (b.replay or {}).get("tokens_moved")  # older records lack it
        lines.append(
            f"| {r.rung} | {r.control} | {r.size} | {r.num_rollout or '—'} | {'—' if moved is None else f'{moved:,}'} | {b.planted_lever or '—'} "
            f"| {_share(b.planted_add_one)} | {signed(b.planted_margin_se, 1)} | {answer} |"
        )
    return lines


def budget_section(root: Path) -> list[str]:
    return [
        "## The drift budget: where the drift lives, by intervention",
        "",
        "Each lever aligns one boundary on both engines; a rung's own tokens are re-scored under it (docs/attribution.md).",
        "Localised: the lever alone removes at least the pre-registered share at 3 SE or more. The budget rungs on the design seeds:",
        "",
        *_design(root),
        "",
        "The planted faults (docs/controls.md), each method on the same runs:",
        "",
        *_controls(root),
        "",
        "A planted fault's own drift, by intervention: the run's tokens re-scored with the fault and without it (its clean",
        "twin, the same weights), differenced per sequence, then budgeted alike: the rung's own drift cancels, so a fault",
        'whose drift is small beside the rung\'s is still placed (docs/controls.md, "Its own drift"):',
        "",
        *_own_drift(root),
    ]
