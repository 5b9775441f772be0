"""The drift budget on the design seeds: what each budget rung answers there, before any judged run.

    flock "$HEAVY_LOCK" .venv/bin/python tools/budget_design.py [--write] [--count N]

For each rung of knobs/levers.yaml budget.rungs, its P1 colocate runs at the design seeds
(knobs/design.yaml seeds.design .. + design_count - 1, never judged by the main job) are found or
launched (harness.experiment.runs.RunSource, the tests' launcher), re-scored under every lever
setting (harness.experiment.budget_scores) and judged (harness.judge.budget), and printed. The
expectations in budget.expect are written from these answers, by hand, with their reasons; --write
records the measured answers below the marker of knobs/levers.yaml (`measured:`) so that every
expectation names what it came from. The judging seeds never enter: the main job judges them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import DEFAULT_KNOBS_DIR, DEFAULT_RUNS_DIR  # noqa: E402
from harness.spec import load_knobs  # noqa: E402
from harness.spec.design_file import load_design  # noqa: E402
from harness.spec.levers import LEVERS_FILE  # noqa: E402
from harness.spec.measured_block import write_below_marker  # noqa: E402

MARKER = "# --- measured by tools/budget_design.py: do not edit by hand below this line ---"
MODE = "colocate"


def _commit() -> str:
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "harness"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + (" (harness/ with uncommitted changes)" if dirty else "")


def _machine() -> str:
    from harness.records.environment import cpu_and_memory

    cpu = cpu_and_memory()
    return f"{cpu['model']}, {cpu['cores']} cores, {cpu['isa']}"


def measure(knobs, runs_dir: Path, seeds: list[int]) -> dict:
    from harness.experiment.budget_scores import seed_scores
    from harness.experiment.runs import LaunchSettings, RunSource
    from harness.judge.budget import answer_margin, judge_budget

    source = RunSource(knobs, "embedded", runs_dir, launch=LaunchSettings(session_started=time.time()))
    stage = knobs.levers.budget.stage
    out = {}
    for rung in knobs.levers.budget.rungs:
        runs = source.many([(stage, rung, MODE, {"seed": seed}) for seed in seeds])
        started = time.monotonic()
        budget = judge_budget(rung, seed_scores(runs, knobs.levers), knobs.levers, knobs)
        print(budget.text(), flush=True)
        margin = answer_margin(budget)
        seeds_needed = _seeds_needed(budget, knobs)
        out[rung] = {
            "verdict": budget.verdict,
            "boundary": budget.boundary,
            "localised": [row.lever for row in budget.levers if row.localisation == "localised"],
            "margin_se": None if margin is None else round(margin.se_units, 2),
            # the design's rule (harness.judge.design.needed_pairs): seeds for the judged margin to reach
            # the target with the seeds' own spread, R - 1 degrees of freedom and the SE's scatter
            "seeds_needed": seeds_needed,
            # each operator lever that changes anything (a lever that leaves every gap as it was rules itself
            # out by construction): the seeds its own answer needs, localised or ruled out
            "lever_seeds_needed": {
                row.lever: _lever_seeds_needed(budget, row, knobs)
                for row in budget.levers
                if row.kind == "operator" and (row.add.low, row.add.high) != (0.0, 0.0) and abs(row.add.value) >= 1e-4
            },
            "drift": float(f"{budget.drift:.4g}"),
            "residual_all_levers": round(budget.residual.value, 4),
            "add_one": {row.lever: [round(row.add.value, 4), round(row.add.low, 4), round(row.add.high, 4)] for row in budget.levers},
            "leave_one_out": {
                row.lever: [round(row.loo.value, 4), round(row.loo.low, 4), round(row.loo.high, 4)] for row in budget.levers if row.loo
            },
            "runs": list(budget.runs),
            "replay": {run: {k: v for k, v in r.items() if k != "scorer_seconds"} for run, r in budget.replay.items()},
            "seconds": round(time.monotonic() - started, 1),
        }
    return out


def _seeds_needed(budget, knobs) -> int | str:
    """Seeds the rung's answer needs (its deciding lever: the one localised to, else the nearest to the
    share); _lever_seeds_needed's rule."""
    operators = [row for row in budget.levers if row.kind == "operator"]
    row = budget.lever(budget.boundary) if budget.boundary else max(operators, key=lambda r: r.add.value)
    return _lever_seeds_needed(budget, row, knobs)


def _lever_seeds_needed(budget, row, knobs) -> int | str:
    """Seeds one lever's answer (localised above the share, ruled out below it) needs, by the design
    rule the other questions are sized with: each seed's share against the share's threshold is one
    pair, the pairs' spread counted, R - 1 degrees of freedom always, the judge's SE at its 95%
    quantile; the budget's decision needs min_margin_se SE, no interval on top."""
    from harness.judge.design import MAX_SEEDS, needed_pairs, side_variance
    from harness.spec.design_file import load_design

    sign = 1.0 if row.add.value > budget.min_share else -1.0
    values = [sign * (row.by_seed[s]["add"].value - budget.min_share) for s in budget.seeds]
    within = [row.by_seed[s]["add"].se ** 2 for s in budget.seeds]
    need = needed_pairs("up", side_variance(values, within, 1), 0.0, load_design(knobs.root).target_margin_se, 1.0, budget.min_margin_se)
    return need.seeds if need.seeds is not None else f"more than {MAX_SEEDS}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knobs", type=Path, default=DEFAULT_KNOBS_DIR)
    parser.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)
    parser.add_argument("--write", action="store_true", help=f"record the answers below the marker of knobs/{LEVERS_FILE}")
    parser.add_argument("--count", type=int, help="design seeds from the first (default: knobs/design.yaml seeds.design_count)")
    args = parser.parse_args(argv)
    knobs, design = load_knobs(args.knobs), load_design(args.knobs)
    seeds = list(range(design.seeds.design, design.seeds.design + (args.count or design.seeds.design_count)))
    measured = {
        "date": dt.date.today().isoformat(),
        "commit": _commit(),
        "machine": _machine(),
        "seeds": seeds,
        "rungs": measure(knobs, args.runs_dir, seeds),
    }
    if args.write:
        print(f"wrote {write_below_marker(args.knobs / LEVERS_FILE, MARKER, {'measured': measured})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
