"""The command line: `python -m harness <command>`.

Each command lives next to the code it drives and registers itself here through a
`register(subparsers)` function; this module only assembles them and turns expected errors
(SpecError and friends) into one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from harness import DEFAULT_KNOBS_DIR
from harness.arguments import existing_dir
from harness.spec import SpecError, load_knobs, render_argv, resolve, validate
from harness.spec.render import argv_lines, parse_value

# Modules that add subcommands; a module whose optional dependencies are missing is skipped with
# a note in --help rather than breaking the commands that do work.
COMMAND_MODULES = (
    "harness.launch.command",
    "harness.records.command",
    "harness.attribution.command",
    "harness.report.command",
)


def parse_sets(pairs: list[str]) -> dict:
    """`--set num-rollout=3` -> {"num-rollout": 3}; values read as YAML scalars (null removes)."""
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SpecError(f"--set {pair!r}: expected FLAG=VALUE with the VIME flag name without dashes, e.g. --set num-rollout=3")
        overrides[name.strip().lstrip("-")] = None if value.strip() == "null" else parse_value(value.strip())
    return overrides


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a bad argument is one `error:` line (exit 2) rather than the usage
    block followed by the error: the line names the command, the argument and what was expected."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that pick one resolved spec; shared by argv, run and others."""
    parser.add_argument("--stage", required=True, help="p0..p3 (knobs/stages.yaml)")
    parser.add_argument("--rung", required=True, help="a rung id (knobs/ladder/*.yaml)")
    parser.add_argument("--mode", default="colocate", help="colocate | non-colocate")
    parser.add_argument("--backend", default="embedded", help="embedded | vime | records")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="knobs directory")
    parser.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                        help="override a VIME flag (name without dashes); repeatable")


def spec_from_args(args: argparse.Namespace):
    knobs = load_knobs(existing_dir(args.knobs, "--knobs", "a knobs directory (base.yaml, stages.yaml, ladder/, ...)"))
    spec = resolve(knobs, args.stage, args.rung, args.mode, args.backend, parse_sets(args.set))
    return knobs, validate(spec, knobs)


def cmd_argv(args: argparse.Namespace) -> int:
    _, spec = spec_from_args(args)
    argv = render_argv(spec.flags)
    if args.json:
        print(json.dumps(argv))
        return 0
    for line in argv_lines(argv):  # one flag per line: easy to diff between rungs
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m harness", description="vime-mismatch-lab: the train-inference mismatch experiment for VIME")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    argv_parser = commands.add_parser("argv", help="print the VIME argv of one resolved spec")
    add_spec_arguments(argv_parser)
    argv_parser.add_argument("--json", action="store_true", help="print a JSON list instead of one flag per line")
    argv_parser.set_defaults(func=cmd_argv)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):
                continue  # that part of the harness is not built yet
            raise
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from harness.launch.runner import Terminated

    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except SpecError as err:
        for problem in err.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except Terminated as stop:
        # A scheduler's SIGTERM: the launcher has stopped its trainer and recorded the run.
        print(f"terminated by {stop}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error of ours.
        sys.stdout = open(os.devnull, "w")
        return 0
