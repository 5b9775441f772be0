"""`python -m harness ingest PATH [--json] [--out DIR] [--trust-dumps] [--num-rollout N] [--site FILE]`.

Without --json it writes a run directory (reports/runs/ingested-<content hash>, or --out) and
prints its path on the last line; with --json it prints the records as JSON lines in the
metrics.jsonl shape. Bad input: one `error:` line per problem on stderr and exit code 2, after
keeping every readable record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.arguments import writable_dir
from harness.records.atomic import to_json
from harness.records.ingest import ingest, is_run_directory, write_run_directory
from harness.records.ingest_identity import check_same_run, ingested_run_id
from harness.records.rundir import written_by_harness
from harness.records.wandb_run import online_path
from harness.spec.errors import SpecError
from harness.spec_arguments import add_site_argument, site_default, site_from_args


def replaceable_run_dir(path: str | Path, option: str) -> Path:
    """A run directory to write whole: absent, empty, or a run directory this tool wrote before.
    Anything else is the user's and is never replaced (it would be deleted)."""
    path = Path(path)
    writable_dir(path.parent if not path.exists() else path, option)
    alive = _trainer_still_writing(path)
    if alive:
        raise SpecError(f"{option} {path}: a run directory whose trainer still writes to it, {alive}; refusing to replace it")
    if path.is_dir() and any(path.iterdir()) and not written_by_harness(path):
        raise SpecError(
            f"{option} {path}: an existing directory that is not a run directory written by this tool; "
            f"refusing to replace it (its files would be deleted): choose a new or empty directory"
        )
    return path


def _trainer_still_writing(path: Path) -> str | None:
    """For a run directory the launcher wrote: a sentence if the trainer it started still runs."""
    # The launcher's files: this command is a front end (harness/cli.py), so it may ask the launch
    # layer, which the records layer below it may not.
    from harness.launch.runner import TRAINER_FILE
    from harness.launch.sources import trainer_still_running

    try:
        identity = json.loads((path / TRAINER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return trainer_still_running(identity) if isinstance(identity, dict) else None


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="turn a VIME log / log directory / TensorBoard events / debug dumps into a run directory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "path",
        help="a log file, a directory (logs, TensorBoard events, W&B offline runs, .pt dumps), a run directory, "
        "or an online W&B run: wandb:ENTITY/PROJECT/RUN_ID, its URL, or wandb:RUN_ID with the site file's wandb project",
    )
    parser.add_argument("--json", action="store_true", help="print records as JSON lines instead of writing a run directory")
    parser.add_argument("--out", type=Path, default=None, help="run directory to write (default reports/runs/ingested-<hash>)")
    parser.add_argument(
        "--runs-dir", type=Path, default=None, help="where the default run directory goes (default: the site's runs-dir, else reports/runs)"
    )
    add_site_argument(parser)
    parser.add_argument("--trust-dumps", action="store_true", help="load dumps with torch.load(weights_only=False): only for files you trust")
    for label in ("rung", "stage", "mode"):
        parser.add_argument(f"--{label}", default=None, help=f"label the run directory with its {label}, so `pytest --backend=records` finds it")
    parser.add_argument(
        "--num-rollout",
        type=_positive_int,
        default=None,
        help="how many rollouts the run was launched with, for a log that does not print its arguments "
        "(finished means every rollout id below it is logged)",
    )
    parser.set_defaults(func=cmd_ingest)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of rollouts, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 rollout, got {value}")
    return value


def default_runs_dir() -> Path:
    from harness import DEFAULT_RUNS_DIR

    return DEFAULT_RUNS_DIR


def site_run_path(text: str, site) -> str:
    """`wandb:RUN_ID` names a run of the site's W&B project; every other form is returned as given."""
    if not text.startswith("wandb:") or "/" in text:
        return text
    run_id = text.removeprefix("wandb:")
    wandb = site.wandb if site is not None else None
    if wandb is None or not wandb.entity:
        where = f"the site file {site.source}" if site is not None else "no site file (--site)"
        raise SpecError(
            f"{text}: a bare W&B run id needs the site's wandb project and entity ({where} sets no wandb.entity); give wandb:ENTITY/PROJECT/{run_id}"
        )
    return f"wandb:{wandb.entity}/{wandb.project}/{run_id}"


def cmd_ingest(args: argparse.Namespace) -> int:
    site = site_from_args(args)
    args.path = site_run_path(args.path, site)
    args.runs_dir = Path(site_default(args.runs_dir, site, "runs_dir", str(default_runs_dir())))
    # Paths first, before anything is read: a writer never replaces a directory of the user's.
    if args.out is not None and not args.json:
        replaceable_run_dir(args.out, "--out")
    if args.out is None and not args.json:
        writable_dir(args.runs_dir, "--runs-dir")
    out = None
    online = online_path(args.path)  # a W&B run by path: not a file name (a URL's // must survive)
    path = args.path if online else Path(args.path)
    labels = {k: getattr(args, k) for k in ("rung", "stage", "mode") if getattr(args, k)}
    named_by_content = not args.json and args.out is None and not online and path.exists() and not is_run_directory(path)
    if not args.json:
        if args.out is not None:
            out = args.out
        elif online:
            out = args.runs_dir / f"ingested-wandb-{online.replace('/', '-')}"
    is_log = not online and path.exists() and not is_run_directory(path)
    if out is not None and is_log:
        check_same_run(out, path)
    # A log is read first when its run id comes from what it printed (harness.records.ingest_identity).
    result = ingest(path, None if named_by_content else out, trust_dumps=args.trust_dumps, labels=labels or None, num_rollout=args.num_rollout)
    if named_by_content:
        out = args.runs_dir / ingested_run_id(result, path)
        check_same_run(out, path)
    if named_by_content and (result.records or result.failures):
        replaceable_run_dir(out, "--runs-dir")
        result.run_dir = write_run_directory(result, out, labels or None)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    if result.records or result.failures:
        # What the run is, in one line: finished only when its records cover every rollout it was launched with.
        state = result.state()
        print(f"state: {state}" + (f" ({result.note})" if result.note and state != "finished" else ""), file=sys.stderr)
    if args.json:
        for record in result.records:
            print(to_json(record.to_json_dict(), indent=None))
    elif result.run_dir is not None:
        print(result.run_dir)
    elif not online and is_run_directory(path):
        print(path.resolve())
    return 2 if result.problems else 0
