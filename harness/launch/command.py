"""`python -m harness run`: resolve, validate, launch (or reuse) one run; print its directory last."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import DEFAULT_RUNS_DIR
from harness.arguments import existing_dir, positive_seconds, writable_dir
from harness.spec import SpecError, backends
from harness.spec_arguments import add_spec_arguments, site_default, spec_from_args


def check_embedded_flags(spec) -> None:
    """The embedded trainer's own flag table, asked before launch: a flag it does not know (a typo
    in a rung or in --set) is one line now, not "trainer exited with code 2" after the start-up."""
    from harness.embedded import flags as flag_table
    from harness.spec import render_argv

    try:
        flag_table.parse(render_argv(spec.flags))
    except flag_table.FlagError as err:
        origin = {name: spec.provenance.get(name, "?") for name in spec.flags}
        names = [name for name in spec.flags if f"--{name}" in str(err).split(";")[0].split()]
        where = f" (set by {origin[names[0]]})" if names else ""
        raise SpecError(f"--backend embedded: {err}{where}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from harness.launch.runner import LaunchOptions, ensure_run, read_state
    from harness.spec.budget import run_timeout

    knobs, spec = spec_from_args(args)
    site = knobs.site
    runs_dir = site_default(args.runs_dir, site, "runs_dir", str(DEFAULT_RUNS_DIR))
    writable_dir(runs_dir, "--runs-dir")
    if args.vime_root is not None:
        existing_dir(args.vime_root, "--vime-root", "a VIME checkout with train.py")
    if backends.backend(spec.backend).trainer_in_repo:  # this repository's trainer: its flags are checked before it starts
        check_embedded_flags(spec)
    timeout, why = (args.timeout, "--timeout") if args.timeout is not None else run_timeout(knobs, spec)
    options = LaunchOptions(
        runs_dir=Path(runs_dir),
        rerun=args.rerun,
        vime_root=args.vime_root,
        ray_address=site_default(args.ray_address, site, "ray_address"),
        timeout_s=timeout,
        timeout_why=why,
        image=args.image,
        site=site,
    )
    run_dir = ensure_run(spec, options)
    state = read_state(run_dir)
    status = run_dir.read_status()
    if state != "finished":
        failure = status.get("failure") or {}
        print(
            f"run {spec.run_id} {state}: {failure.get('signature', '?')} at log line {failure.get('line', '?')}: {failure.get('text', '')}",
            file=sys.stderr,
        )
    print(run_dir.path)
    return 0 if state == "finished" else 1


def register(commands) -> None:
    parser = commands.add_parser("run", help="launch (or reuse) the run of one resolved spec; prints the run directory")
    add_spec_arguments(parser)
    parser.add_argument("--runs-dir", default=None, help="where run directories live (default: the site's runs-dir, else reports/runs)")
    parser.add_argument("--rerun", action="store_true", help="launch even if a finished run with this spec exists")
    parser.add_argument("--vime-root", default=None, help="VIME checkout with train.py (--backend vime; default: the site's vime-root)")
    parser.add_argument(
        "--ray-address",
        default=None,
        help="submit as a Ray job to this address instead of a local process (default: the site's ray-address); "
        "a job of this run that still runs is attached to, not submitted again",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        help="seconds before the harness stops the run (> 0; default: the stage's budget in knobs/launch.yaml)",
    )
    parser.add_argument("--image", default=None, help="container image to record in the environment record")
    parser.set_defaults(func=cmd_run)
    from harness.launch.status import register as register_status

    register_status(commands)
