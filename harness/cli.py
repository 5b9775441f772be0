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

from harness.spec import SpecError, render_argv
from harness.spec.render import argv_lines
from harness.spec_arguments import add_spec_arguments, spec_from_args

# Modules that add subcommands; a module whose optional dependencies are missing is skipped with
# a note in --help rather than breaking the commands that do work.
COMMAND_MODULES = (
    "harness.launch.command",
    "harness.records.command",
    "harness.attribution.command",
    "harness.report.command",
    "harness.experiment.command",
    "harness.experiment.sweep",
    "harness.spec.model_import",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a bad argument is one `error:` line (exit 2) rather than the usage
    block followed by the error: the line names the command, the argument and what was expected."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def cmd_argv(args: argparse.Namespace) -> int:
    _, spec = spec_from_args(args)
    argv = render_argv(spec.flags)
    for note in spec.notes:  # what the argv stands for when it is not the rung as written
        print(f"note: {note}", file=sys.stderr)
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
