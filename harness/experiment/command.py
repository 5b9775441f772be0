"""The main job from the command line, without pytest (harness.experiment.main_job):

    python -m harness baseline                                   # make baseline's runs and answers
    python -m harness baseline --seed-offset 600 --out reports/sweep-600
    python -m harness judge --runs-dir reports/runs              # the same answers on recorded runs only
    python -m harness judge --baseline B.log --candidate C.log   # one A/B of two VIME runs (harness.experiment.pair_judge)

`baseline` launches (or reuses, by run id) every run the main job needs, side by side, then decides
every check; `judge` finds the runs in a directory (by run id, else by the hash of their resolved
flags) and launches nothing: a check whose runs are missing fails with the lookup's line. Both print
one line a check, then write the experiment record (OUT/experiment/experiment.json), the summary
table (OUT/summary.md, summary.csv) and the experiment page (OUT/experiment/index.html, printed
last). Exit status 0 when every check passed, 1 when one failed (its line says why), 2 when the
input is unusable (knobs/, the runs directory, a site file).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, DEFAULT_RUNS_DIR, REPO_ROOT
from harness.spec import SpecError, backends
from harness.spec_arguments import add_set_argument, add_site_argument

DEFAULT_JUDGED = REPO_ROOT / "reports" / "judged"
DEFAULT_BASELINE = REPO_ROOT / "reports" / "baseline"


def _source(args: argparse.Namespace, find_only: bool):
    from harness.experiment.runs import LaunchSettings, RunSource
    from harness.spec_arguments import knobs_from_args, site_default, site_from_args

    # The site file and --set resolve the runs' specs as the session that made them did (a cluster's
    # checkpoint paths are part of the flags a recorded run is found by); the site's runs-dir is the default.
    runs_dir = Path(site_default(args.runs_dir, site_from_args(args), "runs_dir", str(DEFAULT_RUNS_DIR)))
    if find_only and not runs_dir.is_dir():
        raise SpecError(f"--runs-dir {runs_dir}: no such directory (the run directories `make baseline` leaves in {DEFAULT_RUNS_DIR})")
    knobs = knobs_from_args(args)
    launch = None
    if not find_only:
        # A cluster's runs take hours: a line per run every 30 s (rollout i/N, ETA); an embedded batch says a line per run.
        progress = print if backends.backend(args.backend).long_runs else None
        launch = LaunchSettings(
            rerun=args.rerun, session_started=time.time(), parallel_runs=args.parallel_runs, batch_sink=print, progress_sink=progress
        )
    return knobs, RunSource(knobs, args.backend, runs_dir, seed_offset=args.seed_offset, find_only=find_only, launch=launch)


def _decide(args: argparse.Namespace, find_only: bool, front_end: str) -> int:
    from harness.experiment.main_job import print_outcomes, run_main_job, write_outputs

    knobs, source = _source(args, find_only)
    session = run_main_job(source, knobs, args.mode, args.stage)
    counts = print_outcomes(session)
    print(write_outputs(session, Path(args.out), options=vars(args), front_end=front_end))
    return 1 if counts["failed"] else 0


def cmd_judge_pair(args: argparse.Namespace) -> int:
    from harness.experiment.pair_judge import judge_pair, load_side, write_pair
    from harness.spec_arguments import knobs_from_args, site_default, site_from_args

    if not (args.baseline and args.candidate):
        raise SpecError("--baseline and --candidate go together: the two runs of one A/B (logs or run directories)")
    runs_dir = Path(site_default(args.runs_dir, site_from_args(args), "runs_dir", str(DEFAULT_RUNS_DIR)))
    knobs = knobs_from_args(args)
    baseline, candidate = load_side(args.baseline, runs_dir, "baseline"), load_side(args.candidate, runs_dir, "candidate")
    judgement = judge_pair(baseline, candidate, knobs)
    for problem in judgement.contract:
        print(f"CONTRACT {problem}")
    if judgement.execution:
        print(judgement.execution)
    for answer in judgement.answers:
        print(f"{'PASSED' if answer.passed else 'FAILED':7} {answer.question}\n        {answer.message}")
    print(write_pair(judgement, knobs, Path(args.out)))
    return 0 if judgement.passed else 1


def cmd_judge(args: argparse.Namespace) -> int:
    if args.baseline or args.candidate:
        return cmd_judge_pair(args)
    return _decide(args, find_only=True, front_end="python -m harness judge")


def cmd_baseline(args: argparse.Namespace) -> int:
    from harness.launch.runner import signals_raise

    # SIGTERM and SIGHUP stop the runs this command started, as Ctrl-C does; each keeps what it logged.
    with signals_raise():
        return _decide(args, find_only=False, front_end="python -m harness baseline")


def _common(parser: argparse.ArgumentParser, out: Path) -> None:
    parser.add_argument("--runs-dir", default=None, help=f"where the run directories are (default: the site's runs-dir, else {DEFAULT_RUNS_DIR})")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="the knobs directory (the experiment spec)")
    add_site_argument(parser)
    add_set_argument(parser)  # the flags the runs are made with, as the session that made them took them
    parser.add_argument("--mode", default="colocate", choices=("colocate", "non-colocate"), help="the session's run mode (default: colocate)")
    parser.add_argument("--backend", default="embedded", help="the backend the runs are made on: their specs are resolved for it (default: embedded)")
    parser.add_argument("--stage", default="p1", help="the ladder stage judged (default: p1, the main job's)")
    parser.add_argument("--seed-offset", type=int, default=0, help="added to every run's seed (pytest's --seed-offset)")
    parser.add_argument("--out", default=str(out), help=f"where the record, summary and page go (default: {out})")


def cmd_budget(args: argparse.Namespace, knobs) -> int:
    """The drift budget of the runs given (one run a seed, one rung), printed (--json: one object)."""
    import json
    import sys

    from harness.experiment.budget_scores import NotMeasured, fault_drift_scores, seed_scores
    from harness.judge.budget import BudgetInputError, judge_budget
    from harness.records.rundir import RunDir

    if knobs.levers is None:
        raise SpecError(f"{args.knobs}: no levers.yaml: no lever table to budget with")
    runs = [RunDir(Path(path)).load() for path in [args.run_dir, *args.more_runs]]
    if args.own_drift and len(runs) != 1:
        raise SpecError(f"--own-drift: one run with a planted fault, got {len(runs)} run directories")
    try:
        if args.own_drift:
            name = f"{runs[0].spec.rung or runs[0].id}, {runs[0].spec.flag('embedded-inject')}'s own drift"
            budget = judge_budget(name, fault_drift_scores(runs[0], knobs.levers), knobs.levers, knobs)
        else:
            budget = judge_budget(runs[0].spec.rung or runs[0].id, seed_scores(runs, knobs.levers), knobs.levers, knobs)
    except (NotMeasured, BudgetInputError) as why:
        print(f"drift budget not measured: {why}", file=sys.stderr)
        return 1
    print(json.dumps(budget.as_dict(), indent=2) if args.json else budget.text())
    return 0


def extend_attribute(subparsers) -> None:
    """`python -m harness attribute RUN_DIR [RUN_DIR ...] --budget`: the runs' drift budget by
    intervention (harness.judge.budget), one run a seed of one rung, instead of the probes. The
    attribute command is attribution's (harness.attribution.command, registered first); the budget
    composes attribution's runs with the judge, so its option is added from this layer."""
    from harness.spec import load_knobs

    parser = subparsers.choices["attribute"]
    parser.add_argument("more_runs", nargs="*", metavar="RUN_DIR", help="with --budget: the rung's runs at further seeds")
    parser.add_argument(
        "--budget",
        action="store_true",
        help="print the drift budget instead of the probes: each lever alone and all but it, on the runs' own tokens (docs/attribution.md)",
    )
    parser.add_argument(
        "--own-drift",
        action="store_true",
        help="with --budget, one run with a planted fault: budget what the fault adds (its clean twin re-scored on the same tokens, differenced)",
    )
    probes = parser.get_default("func")
    parser.set_defaults(func=lambda args: cmd_budget(args, load_knobs(Path(args.knobs))) if args.budget or args.own_drift else probes(args))


def register(subparsers) -> None:
    extend_attribute(subparsers)
    paragraphs = __doc__.split("\n\n")
    judge = subparsers.add_parser(
        "judge",
        help="judge the main job (P1 ladder, acceptance, P3 A/B) on recorded runs and write its record and page, without pytest",
        description=paragraphs[2],
    )
    _common(judge, DEFAULT_JUDGED)
    judge.add_argument("--baseline", default=None, help="one A/B instead of the main job: the baseline run (a VIME log or a run directory)")
    judge.add_argument("--candidate", default=None, help="the candidate run of that A/B (a VIME log or a run directory)")
    judge.set_defaults(func=cmd_judge)
    baseline = subparsers.add_parser(
        "baseline",
        help="run the main job (P1 ladder, acceptance, P3 A/B): launch or reuse its runs, decide every check, write its record and page",
        description=paragraphs[2],
    )
    _common(baseline, DEFAULT_BASELINE)
    baseline.add_argument("--rerun", action="store_true", help="launch every run again even when a finished one exists")
    baseline.add_argument("--parallel-runs", type=int, default=None, help="runs at once (default: knobs/launch.yaml parallel)")
    baseline.set_defaults(func=cmd_baseline)
