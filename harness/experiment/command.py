"""`python -m harness judge --runs-dir DIR`: the main job judged on recorded runs, without pytest.

    python -m harness judge --runs-dir reports/runs                 # make baseline's runs
    python -m harness judge --runs-dir DIR --seed-offset 100 --out reports/judged-100

Every check of the Makefile's baseline selection (harness.experiment.session) is judged on the
runs found in DIR (by run id, else by the hash of their resolved flags; nothing is launched), one
line each, then the experiment record (OUT/experiment/experiment.json), the summary table
(OUT/summary.md, summary.csv) and the experiment page (OUT/experiment/index.html, printed last)
are written. Exit status 0 when every check passed, 1 when one failed (its line says why), 2 when
the input is unusable (knobs/, the runs directory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, DEFAULT_RUNS_DIR, REPO_ROOT
from harness.spec import SpecError
from harness.spec_arguments import add_set_argument, add_site_argument

DEFAULT_OUT = REPO_ROOT / "reports" / "judged"


def cmd_judge(args: argparse.Namespace) -> int:
    from harness.experiment.runs import RunSource
    from harness.experiment.session import NOT_JUDGED_HERE, judge_main_job
    from harness.spec_arguments import knobs_from_args, site_default, site_from_args

    # The site file and --set resolve the runs' specs as the session that made them did (a cluster's
    # checkpoint paths are part of the flags a recorded run is found by); the site's runs-dir is the default.
    runs_dir = Path(site_default(args.runs_dir, site_from_args(args), "runs_dir", str(DEFAULT_RUNS_DIR)))
    if not runs_dir.is_dir():
        raise SpecError(f"--runs-dir {runs_dir}: no such directory (the run directories `make baseline` leaves in {DEFAULT_RUNS_DIR})")
    knobs = knobs_from_args(args)
    source = RunSource(knobs, args.backend, runs_dir, seed_offset=args.seed_offset, find_only=True)
    session = judge_main_job(source, knobs, args.mode, args.stage)
    for nodeid, outcome in session.outcomes.items():
        why = session.messages.get(nodeid, "")
        print(f"{outcome.upper():7} {nodeid}" + (f"\n        {why.splitlines()[0]}" if why else ""))
    page = write_outputs(session, Path(args.out), options=vars(args))
    counts = {o: list(session.outcomes.values()).count(o) for o in ("passed", "failed", "skipped")}
    print(", ".join(f"{n} {o}" for o, n in counts.items()))
    for path, why in NOT_JUDGED_HERE.items():
        print(f"not judged here: {path} ({why})")
    print(page)
    return 1 if counts["failed"] else 0


def write_outputs(session, out: Path, options: dict) -> Path:
    """The experiment record, the summary table and the experiment page of a judged session; the page's path."""
    from harness.report.answers import render_markdown as render_answers
    from harness.report.command import build_experiment_page
    from harness.report.experiment_record import FOLDER, add_entry, new_record, tested_nodeids, write_record
    from harness.report.summary import write_summary

    shown = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if k not in ("func", "command")}
    record = new_record(argv=["python", "-m", "harness", "judge", *sys.argv[2:]], options={**shown, "front_end": "python -m harness judge"})
    for kind, entry in session.entries:
        add_entry(record, kind, entry)
    record.min_margin_se = minimum = float(session.knobs.threshold("min_margin_se"))
    record.outcomes = {nodeid: session.outcomes.get(nodeid, "not reported") for nodeid in sorted(tested_nodeids(record))}
    record_dir = write_record(record, out / FOLDER).parent
    if session.rows:
        write_summary(session.rows, out, render_answers(record.answers, minimum) if record.answers else "")
    return build_experiment_page(record_dir, record_dir / "index.html")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "judge",
        help="judge the main job (P1 ladder, acceptance, P3 A/B) on recorded runs and write its record and page, without pytest",
        description=__doc__.split("\n\n")[2],
    )
    parser.add_argument("--runs-dir", default=None, help=f"where the run directories are (default: the site's runs-dir, else {DEFAULT_RUNS_DIR})")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="the knobs directory (the experiment spec)")
    add_site_argument(parser)
    add_set_argument(parser)  # the flags the runs were made with, as the session that made them took them
    parser.add_argument("--mode", default="colocate", choices=("colocate", "non-colocate"), help="the session's run mode (default: colocate)")
    parser.add_argument(
        "--backend", default="embedded", help="the backend the runs were made on: their specs are resolved for it (default: embedded)"
    )
    parser.add_argument("--stage", default="p1", help="the ladder stage judged (default: p1, the main job's)")
    parser.add_argument("--seed-offset", type=int, default=0, help="the offset the runs were made with (pytest's --seed-offset; tools/seed_sweep.py)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"where the record, summary and page go (default: {DEFAULT_OUT})")
    parser.set_defaults(func=cmd_judge)
