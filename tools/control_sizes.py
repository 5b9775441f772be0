"""How large a numerical control must be for the boundary table to localise it on a rung at its own
precision (docs/controls.md): each control (harness/embedded/numeric_faults.py) at a few sizes on
the bf16 near-aligned and fp8-rollout rungs, small runs (P1, colocate, --num-rollout 3: one capture,
at rollout 2, at the first calibration seed of knobs/calibration.yaml, which no judged run uses), launched through harness.experiment.runs.RunSource - the launcher the tests use, so
a test that asks for the same spec reuses the run.

    flock "$HEAVY_LOCK" .venv/bin/python tools/control_sizes.py --rung near-aligned \\
        --inject rollout-lse-bf16 --inject trainer-softmax-bits:5 [--inject none] [--max-minutes 6]
    .venv/bin/python tools/control_sizes.py --report          # launches nothing: the table from the JSON
    flock "$HEAVY_LOCK" .venv/bin/python tools/control_sizes.py --remeasure   # recorded runs' tables again, no launch

Per run it records the boundary the table localises (or none) and the side the own-input check names
there, the ratio at the control's own boundary, the largest ratio at any other boundary, each side's
own-input ratio at every boundary, the capture coverage, the class, and k and k_own read from the
knobs at that moment (a ratio does not depend on k; whether a row breaks does). --remeasure
recomputes every recorded entry's table from its run directory (the run is not launched again), so
entries recorded before the own-input check get its ratios. The results
accumulate in reports/controls/control_sizes.json (one entry per run id) and are written as
reports/controls/control_sizes.md, and printed. --inject none gives the rung's own ratios without a
control. Bad input is one line and exit code 2; a run that fails is reported and exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from harness import DEFAULT_KNOBS_DIR, DEFAULT_RUNS_DIR  # noqa: E402
from harness.embedded.flags import FlagError  # noqa: E402
from harness.embedded.injections import FP8_WEIGHT_SCALE, SIZED, parse  # noqa: E402
from harness.experiment import control_variants  # noqa: E402
from harness.spec import SpecError, load_knobs  # noqa: E402

OUT_DIR = ROOT / "reports" / "controls"
STAGE, MODE, NUM_ROLLOUT = "p1", "colocate", 3  # the controls' runs in tests/attribution/test_boundaries_on_runs.py
# the ladder's rungs the controls run on, then rungs of their own: a ladder rung with flags set
# (harness.experiment.control_variants)
RUNGS = ("near-aligned", "fp8-rollout", "fp32-floor", "top-p", "fp8-plus-filters", "fp8-plus-filters-moe", *control_variants.VARIANTS)
NONE = "none"
# the boundary each control is planted at (harness/embedded/numeric_faults.py)
PLANTED = {
    "rollout_lse_bits": "logsumexp",
    "trainer_softmax_bits": "layer.0.attention",
    "trainer_softmax_sum_bits": "layer.0.attention",
    "trainer_tp_reduce_bits": "layer.0.mlp",
    "rollout_fp8_weight_scale": "layer.0.attention",
    "trainer_lm_head_bits": "logits",
    "rollout_filter_bits": "processed_logprob",
    "trainer_expert_bits": "layer.0.mlp",
}
# the lever of knobs/levers.yaml whose boundary each control is planted at: the drift budget's answer
LEVER = {
    "rollout_lse_bits": "log-softmax",
    "trainer_softmax_bits": "attention-prefill",
    "trainer_softmax_sum_bits": "attention-prefill",
    "trainer_tp_reduce_bits": "mlp",
    "rollout_fp8_weight_scale": "fp8-weights",
    "trainer_lm_head_bits": "lm-head",
    "rollout_filter_bits": "sampler-filter",
    "trainer_expert_bits": "mlp",
}
# the engine each control is planted in: the side the own-input check should name
PLANTED_SIDE = {
    "rollout_lse_bits": "rollout",
    "trainer_softmax_bits": "trainer",
    "trainer_softmax_sum_bits": "trainer",
    "trainer_tp_reduce_bits": "trainer",
    "rollout_fp8_weight_scale": "rollout",
    "trainer_lm_head_bits": "trainer",
    "rollout_filter_bits": "rollout",
    "trainer_expert_bits": "trainer",
}
console = Console(stderr=True)


def control_of(inject: str) -> tuple[str, str, str | None]:
    """(the canonical --embedded-inject value, the control's name, its planted boundary) of one
    --inject value (one numerical control or ``none``); FlagError for anything else."""
    if inject == NONE:
        return NONE, NONE, None
    faults = parse(inject)
    on = [field for field in PLANTED if getattr(faults, field)]
    if len(on) != 1 or len(faults.names()) != 1:
        raise FlagError(f"--inject {inject}: expected one numerical control ({', '.join([*SIZED, FP8_WEIGHT_SCALE])}, a *-bf16 name) or none")
    name = next((n for n, (f, _) in SIZED.items() if f == on[0]), FP8_WEIGHT_SCALE)
    return faults.names()[0], name, PLANTED[on[0]]


def side_of(canonical: str) -> str | None:
    """The engine a control is planted in (None for none)."""
    if canonical == NONE:
        return None
    faults = parse(canonical)
    return next(side for f, side in PLANTED_SIDE.items() if getattr(faults, f))


def size_of(canonical: str) -> str:
    """A control's size as it reads in the table: N bits (7 = bf16) or the scale factor."""
    if canonical == NONE:
        return "-"
    faults = parse(canonical)
    if faults.rollout_fp8_weight_scale:
        return f"F={faults.rollout_fp8_weight_scale:g}"
    bits = next(getattr(faults, f) for f, _ in SIZED.values() if getattr(faults, f))
    return f"{bits} bits" + (" (bf16)" if bits == 7 else "")


def measure(run, knobs, planted: str | None) -> dict:
    """The table of one run, as the tests judge it (boundaries.run_boundary_table, classify)."""
    from harness.attribution.boundaries import classify, run_boundary_table
    from harness.attribution.probes import contract_check, framework_checks

    table = run_boundary_table(run, knobs)
    decided = classify(table, framework_checks(run), contract_check(run, knobs))
    ratios = {r.boundary: r.ratio for r in table.rows}
    own = {r.boundary: {side: o["ratio"] for side, o in r.own.items()} for r in table.rows}
    others = {b: v for b, v in ratios.items() if b != planted}
    worst = max(others, key=lambda b: others[b]) if others else None
    return {
        "status": table.status,
        "k": table.k,
        "k_own": table.k_own,
        "localised": None if table.localised is None else table.localised.boundary,
        "localised_side": table.localised_side,
        "ratio_at_planted": ratios.get(planted) if planted else None,
        "largest_elsewhere": {"boundary": worst, "ratio": others[worst]} if worst else None,
        "coverage_min": table.coverage.get("min"),
        "decides": table.decides,
        "class": decided.label,
        "decided_by": decided.decided_by,
        "reason": decided.reason,
        "notes": table.notes,
        "ratios": ratios,
        "own_ratios": own,
    }


def lever_of(canonical: str) -> str | None:
    """The lever a control's boundary belongs to (None for none)."""
    if canonical == NONE:
        return None
    faults = parse(canonical)
    return next(lever for f, lever in LEVER.items() if getattr(faults, f))


def measure_budget(run, knobs, lever: str | None) -> dict:
    """The run's drift budget (the re-score of its own tokens, harness.judge.budget) and where it
    localises the drift: the planted lever's add-one share with its interval and margin."""
    from harness.experiment.budget_scores import seed_scores
    from harness.judge.budget import judge_budget

    return _budget_answer(judge_budget(run.spec.rung or run.id, seed_scores([run], knobs.levers), knobs.levers, knobs), run, lever)


def measure_own_drift(run, knobs, lever: str) -> dict:
    """The budget of the planted fault's own drift (harness.experiment.budget_scores.fault_drift_scores:
    the run's tokens re-scored with and without the fault, differenced per sequence), in the same shape."""
    from harness.experiment.budget_scores import NotMeasured, fault_drift_scores
    from harness.judge.budget import BudgetInputError, judge_budget

    try:
        seeds = fault_drift_scores(run, knobs.levers)
        budget = judge_budget(f"{run.spec.rung}, {run.spec.flag('embedded-inject')}'s own drift", seeds, knobs.levers, knobs)
    except (NotMeasured, BudgetInputError) as why:
        return {"verdict": "not measured", "boundary": None, "planted_lever": lever, "reason": str(why)}
    return _budget_answer(budget, run, lever)


def _budget_answer(budget, run, lever: str | None) -> dict:
    operators = [row for row in budget.levers if row.kind == "operator"]
    top = max(operators, key=lambda row: row.add.value)
    planted = budget.lever(lever) if lever else None
    return {
        "verdict": budget.verdict,
        "boundary": budget.boundary,
        "localised_levers": [row.lever for row in operators if row.localisation == "localised"],
        "planted_lever": lever,
        "planted_add_one": None if planted is None else [planted.add.value, planted.add.low, planted.add.high],
        "planted_margin_se": None if planted is None else planted.margin.se_units,
        "largest_add_one": {"lever": top.lever, "share": top.add.value},
        "drift": budget.drift,
        "sequences": budget.sequences,
        "min_share": budget.min_share,
        "replay": budget.replay.get(run.id),
    }


def _machine() -> str:
    from harness.records.environment import cpu_and_memory

    cpu = cpu_and_memory()
    return f"{cpu['model']}, {cpu['cores']} cores, {cpu['isa']}" + (f", under {cpu['isa_settings']}" if cpu.get("isa_settings") else "")


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "harness"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + (" (harness/ with uncommitted changes)" if dirty else "")


def calibration_seed(knobs) -> int:
    """The first calibration seed (knobs/calibration.yaml seeds.first): seeds no judged or design run uses."""
    from harness.spec.calibration_file import load_calibration

    return load_calibration(knobs.root).seeds.first


def load_results(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def launch(
    knobs,
    runs_dir: Path,
    rung_injects: list[tuple[str, str]],
    max_minutes: float,
    results: dict,
    *,
    num_rollout: int = NUM_ROLLOUT,
    seed=None,
    budget=False,
    own_drift=False,
) -> list[str]:
    """Run (or reuse) and measure each (rung, inject), one at a time; none started after max_minutes."""
    from harness.experiment.runs import LaunchSettings, RunSource

    source = RunSource(knobs, "embedded", runs_dir, launch=LaunchSettings(session_started=time.time()))
    seed = calibration_seed(knobs) if seed is None else seed
    started, failed = time.monotonic(), []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("control runs", total=len(rung_injects))
        for rung, inject in rung_injects:
            canonical, name, planted = control_of(inject)
            label = f"{rung} / {canonical}"
            if (time.monotonic() - started) / 60 >= max_minutes:
                progress.console.print(f"{label}: not started (past --max-minutes {max_minutes:g}); run again")
                progress.advance(task)
                continue
            progress.update(task, description=f"running {label}")
            # On a calibration seed (knobs/calibration.yaml): a control's size is measured on a seed no
            # judged run uses, never on the judging seed the ladder's classes are decided at.
            overrides = (
                {"num-rollout": num_rollout}
                | ({} if canonical == NONE else {"embedded-inject": canonical})
                | ({} if seed is None else {"seed": seed})
            )
            t0 = time.monotonic()
            try:
                ladder_rung, variant = control_variants.resolve(rung)
                run = source(STAGE, ladder_rung, MODE, **variant, **overrides)
                entry = measure(run, knobs, planted)
                if budget:
                    entry["budget"] = measure_budget(run, knobs, lever_of(canonical))
                if own_drift and canonical != NONE:
                    entry["own_drift"] = measure_own_drift(run, knobs, lever_of(canonical))
            except Exception as err:  # noqa: BLE001 - one failed run is reported and the rest still run
                failed.append(f"{label}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
                progress.console.print(f"[red]{failed[-1]}")
                progress.advance(task)
                continue
            results[run.id] = {
                "rung": rung,
                "control": name,
                "inject": canonical,
                "size": size_of(canonical),
                "planted": planted,
                "run": run.id,
                "seed": run.spec.flag("seed"),
                "num_rollout": num_rollout,
                "date": dt.date.today().isoformat(),
                "machine": _machine(),
                "commit": _commit(),
                "seconds": round(time.monotonic() - t0, 1),
                **entry,
            }
            r = results[run.id]
            progress.console.print(
                f"{label}: {run.id} localised {r['localised'] or 'none'}, {planted or '-'} {_x(r['ratio_at_planted'])}, "
                f"class {r['class']} ({r['seconds']:.0f} s)"
                + (f"; budget: {_budget_text(r['budget'])}" if "budget" in r else "")
                + (f"; its own drift: {_budget_text(r['own_drift'])}" if "own_drift" in r else "")
            )
            progress.advance(task)
    return failed


def remeasure(knobs, runs_dir: Path, results: dict) -> list[str]:
    """Each recorded entry's table again from its run directory (no launch), with today's k and
    k_own and the own-input ratios; an entry whose run directory is gone is reported and kept."""
    from harness.records.rundir import RunDir

    missing = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), console=console) as progress:
        task = progress.add_task("tables of the recorded runs", total=len(results))
        for run_id, entry in results.items():
            path = runs_dir / run_id
            if not path.is_dir():
                missing.append(f"{run_id}: no run directory in {runs_dir}")
            else:
                entry.update(measure(RunDir(path).load(), knobs, entry["planted"]), remeasured=dt.date.today().isoformat())
            progress.advance(task)
    return missing


def _budget_text(b: dict | None) -> str:
    if not b or b["verdict"] == "not measured":
        return f"not measured{': ' + b['reason'] if b else ''}"
    planted = b.get("planted_add_one")
    share = (
        "-"
        if planted is None
        else f"{planted[0]:+.1%} [{planted[1]:+.1%}, {planted[2]:+.1%}] ({b['planted_margin_se']:+.1f} SE from {b['min_share']:.0%})"
    )
    return f"{b['verdict']}{' to ' + b['boundary'] if b['boundary'] else ''}; {b.get('planted_lever') or '-'} {share}"


def budget_markdown(results: dict, key: str = "budget") -> str:
    """The drift budget's answer on each control run that measured it (the second method); with key
    "own_drift", the budget of each planted fault's own drift."""
    head = (
        "| rung | control | size | seed | rollouts | planted lever | its add-one share [95%] | margin from the share | verdict | "
        "largest add-one | run |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = []
    for r in sorted((r for r in results.values() if r.get(key)), key=lambda r: (r["rung"], r["control"], r["inject"])):
        b = r[key]
        if b["verdict"] == "not measured":
            lines.append(
                f"| {r['rung']} | {r['control']} | {r['size']} | {r.get('seed', '-')} | {r.get('num_rollout', '-')} | not measured: {b['reason']} |"
            )
            continue
        planted = b.get("planted_add_one")
        share = "-" if planted is None else f"{planted[0]:+.1%} [{planted[1]:+.1%}, {planted[2]:+.1%}]"
        margin = "-" if b.get("planted_margin_se") is None else f"{b['planted_margin_se']:+.1f} SE"
        verdict = b["verdict"] + (f" to {b['boundary']}" if b["boundary"] else "")
        top = b["largest_add_one"]
        lines.append(
            f"| {r['rung']} | {r['control']} | {r['size']} | {r.get('seed', '-')} | {r.get('num_rollout', '-')} | {b.get('planted_lever') or '-'} | "
            f"{share} | {margin} | {verdict} | {top['lever']} {top['share']:+.1%} | {r['run']} |"
        )
    return "\n".join([head, *lines])


def _rollouts(results: dict) -> str:
    """The rollouts the recorded runs made (each entry's own; the default where an entry predates the field)."""
    return ", ".join(sorted({str(r.get("num_rollout", NUM_ROLLOUT)) for r in results.values()}, key=int)) or str(NUM_ROLLOUT)


def _x(ratio) -> str:
    return "-" if ratio is None else f"{ratio:.3g}x"


def localised_at(ratios: dict, k: float, own_ratios: dict | None = None, k_own: float | None = None) -> str:
    """The first boundary (the table's forward order, as recorded) whose ratio exceeds k, or where a
    side's own-input ratio exceeds k_own (named "boundary (side)"), or none."""
    for boundary, ratio in ratios.items():
        sides = [s for s, r in ((own_ratios or {}).get(boundary) or {}).items() if k_own is not None and r > k_own]
        if sides:
            return f"{boundary} ({', '.join(sides)})"
        if ratio > k:
            return boundary
    return "none"


def own_at_planted(entry: dict) -> float | None:
    """The control's own-input ratio at its planted boundary, on the side it is planted in."""
    side = side_of(entry["inject"])
    return ((entry.get("own_ratios") or {}).get(entry["planted"]) or {}).get(side) if side else None


def largest_own(entry: dict) -> tuple[str, float] | None:
    """The largest own-input ratio anywhere except the control's own boundary and side (for none: anywhere)."""
    side = side_of(entry["inject"])
    pairs = [
        (f"{b} ({s})", r) for b, sides in (entry.get("own_ratios") or {}).items() for s, r in sides.items() if (b, s) != (entry["planted"], side)
    ]
    return max(pairs, key=lambda p: p[1]) if pairs else None


def markdown(results: dict, k_now: float, k_own_now: float | None = None) -> str:
    order = {name: i for i, name in enumerate([NONE, *SIZED, FP8_WEIGHT_SCALE])}

    def key(r):
        return (RUNGS.index(r["rung"]) if r["rung"] in RUNGS else 9, order.get(r["control"], 9), r["inject"])

    own_now = "" if k_own_now is None else f", k_own = {k_own_now:g}"
    head = (
        f"| rung | control | size | planted at | ratio there | largest elsewhere | own ratio there (side) | largest own elsewhere | "
        f"localised (k at run) | k at run | class at run | localised at k = {k_now:g}{own_now} | coverage | run | date |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = []
    for r in sorted(results.values(), key=key):
        elsewhere = r["largest_elsewhere"] or {}
        cov = "-" if r["coverage_min"] is None else f"{r['coverage_min']:.3g}"
        own = own_at_planted(r)
        other = largest_own(r)
        own_text = "not measured" if "own_ratios" not in r else "-" if own is None else f"{_x(own)} ({side_of(r['inject'])})"
        other_text = "-" if other is None else f"{other[0]} {_x(other[1])}"
        at_run = (r["localised"] or "none") + (f" ({r['localised_side']})" if r.get("localised_side") else "")
        lines.append(
            f"| {r['rung']} | {r['control']} | {r['size']} | {r['planted'] or '-'} | {_x(r['ratio_at_planted'])} | "
            f"{elsewhere.get('boundary', '-')} {_x(elsewhere.get('ratio'))} | {own_text} | {other_text} | {at_run} | {r['k']:g} | {r['class']} | "
            f"{localised_at(r['ratios'], k_now, r.get('own_ratios'), k_own_now)} | {cov} | {r['run']} | {r['date']} |"
        )
    return "\n".join([head, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/control_sizes.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rung", action="append", choices=RUNGS, help="rung(s) to run each --inject on (default: near-aligned)")
    parser.add_argument("--inject", action="append", default=[], help="a numerical control at one size (e.g. trainer-softmax-bits:5), or none")
    parser.add_argument("--report", action="store_true", help="launch nothing: print and write the table of the recorded results")
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="launch nothing: recompute every recorded entry's table from its run directory (wrap in the heavy lock)",
    )
    parser.add_argument("--max-minutes", type=float, default=6.0, help="start no run after this many minutes (the heavy lock's hold)")
    parser.add_argument(
        "--num-rollout", type=int, default=NUM_ROLLOUT, help=f"rollouts a control run makes (default {NUM_ROLLOUT}; the budget wants 30)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the runs' seed (default: the stage's; knobs/calibration.yaml names the calibration seeds)"
    )
    parser.add_argument("--budget", action="store_true", help="also measure each run's drift budget (localisation by intervention)")
    parser.add_argument(
        "--own-drift",
        action="store_true",
        help="also budget each planted fault's own drift (the run's tokens re-scored with and without it, differenced)",
    )
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="knobs directory (k: thresholds.boundary_envelope_k)")
    parser.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR), help="where the runs live (default: reports/runs, as the tests')")
    parser.add_argument("--out", default=str(OUT_DIR), help="where control_sizes.json and control_sizes.md are written")
    args = parser.parse_args(argv)
    try:
        for inject in args.inject:
            if control_of(inject)[1] == FP8_WEIGHT_SCALE and set(args.rung or ["near-aligned"]) != {"fp8-rollout"}:
                raise FlagError(f"--inject {inject}: the fp8 weight scale acts only on the fp8 rollout; give --rung fp8-rollout alone")
        knobs = load_knobs(Path(args.knobs))
    except FlagError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SpecError as err:
        print("error: " + "; ".join(err.problems), file=sys.stderr)
        return 2
    if not (args.report or args.remeasure) and not args.inject:
        print("error: --inject: give at least one control (e.g. --inject rollout-lse-bf16), or --report", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = load_results(out / "control_sizes.json")
    failed = []
    if args.remeasure:
        failed = remeasure(knobs, Path(args.runs_dir).resolve(), results)
        for line in failed:
            console.print(f"[red]{line}")
        (out / "control_sizes.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    elif not args.report:
        pairs = [(rung, inject) for rung in (args.rung or ["near-aligned"]) for inject in args.inject]
        failed = launch(
            knobs,
            Path(args.runs_dir).resolve(),
            pairs,
            args.max_minutes,
            results,
            num_rollout=args.num_rollout,
            seed=args.seed,
            budget=args.budget,
            own_drift=args.own_drift,
        )
        (out / "control_sizes.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    table = markdown(results, knobs.threshold("boundary_envelope_k"), knobs.threshold("boundary_own_k"))
    (out / "control_sizes.md").write_text(
        "# Numerical controls by size (tools/control_sizes.py)\n\n"
        f"P1, {MODE}, {_rollouts(results)} rollouts a run, the table read at the capture of rollout 2; ratio = mean divergence / mean envelope; own ratio = a side's "
        "mean |y - f64(x)| / mean |f_declared(x) - f64(x)| on its own inputs; 'localised at k' recomputes the first boundary beyond k, "
        "or a side beyond k_own, from the recorded ratios.\n\n" + table + "\n\n"
        "## The drift budget on the same runs (localisation by intervention)\n\n"
        + budget_markdown(results)
        + "\n"
        + (
            "\n## The planted fault's own drift, by intervention (the run's tokens re-scored with and without it)\n\n"
            + budget_markdown(results, "own_drift")
            + "\n"
            if any("own_drift" in r for r in results.values())
            else ""
        )
    )
    print(table)
    print(budget_markdown(results))
    if any("own_drift" in r for r in results.values()):
        print(budget_markdown(results, "own_drift"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
