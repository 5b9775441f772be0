"""docs/results.md's sections on the measurements the experiment's own numbers rest on: the design
(what each question's sample was sized from: knobs/design.yaml, written by tools/design_sample.py),
the envelope calibration (the boundary table's multiples k and k_own: knobs/calibration.yaml,
written by tools/calibrate_envelopes.py) and the numerical controls (which planted fault the
boundary table localises, by size: reports/controls/control_sizes.json, tools/control_sizes.py).

Both files carry more than the page reads; the models below type the keys it reads and leave the rest
open, so a key the tools add later still loads, and a key the page needs that is missing or malformed
is one line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.report.results_format import num, record_line, signed
from harness.report.results_records import ResultsRecordError, problem_line, read_json

DESIGN = Path("knobs") / "design.yaml"
CALIBRATION = Path("knobs") / "calibration.yaml"
CONTROLS = Path("reports") / "controls" / "control_sizes.json"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class MeasuredOn(_Open):
    seeds: list[int]
    date: str


class MachineAnswer(_Open):
    answer: str
    margin_se_at_design_seeds: float | None = None
    seeds_needed: int | str | None = None
    expected: bool


class Question(MachineAnswer):
    delta: float | None = None
    effect_rule: str | None = None  # how the question's effect of interest was made (knobs/effects.yaml)
    by_machine: dict[str, MachineAnswer] = Field(default_factory=dict)


class DesignMeasured(_Open):
    measured_on: dict[str, MeasuredOn]
    questions: dict[str, Question]


class Multiple(_Open):
    value: float
    aligned_upper: float
    aligned_at: str
    control_lower: float
    control_at: str
    factor_each_side: float


class CalibrationMeasured(_Open):
    date: str
    machines: list[str]
    runs_made_at: list[str]
    seeds: list[int]
    k: Multiple
    k_own: Multiple


class ControlRun(_Open):
    rung: str
    control: str
    size: str
    planted: str | None
    localised: str | None
    localised_side: str | None = None
    date: str
    machine: str
    commit: str
    k: float
    k_own: float | None = None


def _validated(model: type[BaseModel], data: object, shown: str, prefix: str = "") -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        line = problem_line(shown, err)
        raise ResultsRecordError(line.replace(": key '", f": key '{prefix}", 1) if prefix else line) from None


def design_section(root: Path) -> list[str]:
    from harness.spec import SpecError
    from harness.spec.design_file import load_design

    shown = str(DESIGN)
    try:
        measured = load_design(root / "knobs").measured
    except SpecError as err:
        raise ResultsRecordError(err.problems[0]) from None
    design = _validated(DesignMeasured, measured, shown, "measured.")
    kinds = list(design.measured_on)
    dates = sorted({m.date for m in design.measured_on.values()})
    seeds = sorted({s for m in design.measured_on.values() for s in m.seeds})
    lines = [
        "## The design: the sample each question needs",
        "",
        record_line(shown, ", ".join(dates), "not recorded", f"{' and '.join(kinds)} (the record's labels for the CPU kinds)")
        + f"; design seeds {seeds[0]}-{seeds[-1]}, never judged by the main job.",
        "",
        "Each question's effect of interest is its own reference's A/A band or a user-facing margin (knobs/effects.yaml; the",
        "band column). Margin: standard errors past where the decision would flip, at the design's seeds; seeds needed: a side",
        "(pairs for an A/B question) for the design's target margin.",
        "",
        f"| question | answer on the design seeds (delta) | band | margin (SE), {' / '.join(kinds)} | seeds needed, {' / '.join(kinds)} | the main job |",
        "|---|---|---|---|---|---|",
    ]
    for name, q in design.questions.items():
        per = [q.by_machine.get(kind, q) for kind in kinds]
        margins = " / ".join(signed(m.margin_se_at_design_seeds, 1) if m else "—" for m in per)
        needed = " / ".join(str(m.seeds_needed) if m and m.seeds_needed is not None else "—" for m in per)
        delta = f" ({signed(q.delta)})" if q.delta is not None else ""
        band = (q.effect_rule or "—").split(":")[0]
        lines.append(f"| {name} | {q.answer}{delta} | {band} | {margins} | {needed} | {'expects it' if q.expected else 'reports it'} |")
    return lines


def calibration_section(root: Path) -> list[str]:
    from harness.spec import SpecError
    from harness.spec.calibration_file import load_calibration

    shown = str(CALIBRATION)
    try:
        measured = load_calibration(root / "knobs").measured
    except SpecError as err:
        raise ResultsRecordError(err.problems[0]) from None
    record = _validated(CalibrationMeasured, measured, shown, "measured.")
    commits = ", ".join(c[:7] + (" (dirty tree)" if "dirty" in c else "") for c in record.runs_made_at)
    lines = [
        "## The envelope calibration: the boundary table's k and k_own",
        "",
        record_line(shown, record.date, commits, "; ".join(record.machines))
        + f"; calibration seeds {', '.join(str(s) for s in record.seeds)}, never judged (docs/calibration.md).",
        "",
        "Each multiple is the geometric midpoint of the largest upper bound an aligned rung reaches and the smallest lower",
        "bound a planted control reaches at its boundary (95% intervals over captured samples).",
        "",
        "| multiple | value | aligned rungs reach (at most) | controls reach (at least) | factor each side |",
        "|---|---|---|---|---|",
    ]
    for name, m in (("k (cross-engine)", record.k), ("k_own (each side on its own inputs)", record.k_own)):
        lines.append(
            f"| {name} | {num(m.value, 2)} | {num(m.aligned_upper, 4)} ({m.aligned_at}) | {num(m.control_lower, 4)} ({m.control_at}) "
            f"| {num(m.factor_each_side)} |"
        )
    return lines


def _size_order(run: ControlRun) -> tuple:
    return (run.size.startswith("7 bits"), run.size)


def controls_section(root: Path) -> list[str]:
    shown = str(CONTROLS)
    data = read_json(root / shown, shown)
    runs = [_validated(ControlRun, run, shown, f"{key}.") for key, run in data.items()]
    groups: dict[tuple[str, str], list[ControlRun]] = {}
    for run in runs:
        groups.setdefault((run.rung, run.control), []).append(run)
    ks = sorted({f"k = {num(r.k)}" + (f", k_own = {num(r.k_own)}" if r.k_own is not None else "") for r in runs})
    lines = [
        "## The controls: which planted fault the boundary table localises",
        "",
        record_line(
            shown,
            ", ".join(sorted({r.date for r in runs})),
            ", ".join(sorted({r.commit for r in runs})),
            "; ".join(sorted({r.machine for r in runs})),
        )
        + f"; {len(runs)} runs, {'; '.join(ks)} (at each run).",
        "",
        "A fault of each size planted at one boundary of one side (docs/controls.md); localised when the table names the",
        "planted boundary; a control `none` is the rung's own run, where no boundary may be named.",
        "",
        "| rung | control | planted at | localised there | named elsewhere | not localised |",
        "|---|---|---|---|---|---|",
    ]
    for (rung, control), members in groups.items():
        members = sorted(members, key=_size_order)
        there = [r.size for r in members if r.planted and r.localised == r.planted]
        elsewhere = [f"{r.size} ({r.localised})" for r in members if r.localised and r.localised != r.planted]
        missed = [r.size for r in members if r.planted and not r.localised]
        planted = members[0].planted or "—"
        lines.append(f"| {rung} | {control} | {planted} | {', '.join(there) or '—'} | {', '.join(elsewhere) or '—'} | {', '.join(missed) or '—'} |")
    return lines
