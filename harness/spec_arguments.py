"""The arguments that pick one resolved spec (--stage, --rung, --mode, --backend, --knobs, --set),
shared by the `argv` and `run` commands: one place, so the CLI and the launcher's command do not
import each other."""

from __future__ import annotations

import argparse

from harness import DEFAULT_KNOBS_DIR
from harness.arguments import existing_dir
from harness.spec import SpecError, load_knobs, resolve, validate
from harness.spec.render import parse_value


def parse_sets(pairs: list[str]) -> dict:
    """`--set num-rollout=3` -> {"num-rollout": 3}; values read as YAML scalars (null removes)."""
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SpecError(f"--set {pair!r}: expected FLAG=VALUE with the VIME flag name without dashes, e.g. --set num-rollout=3")
        overrides[name.strip().lstrip("-")] = None if value.strip() == "null" else parse_value(value.strip())
    return overrides


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that pick one resolved spec; shared by argv, run and others."""
    parser.add_argument("--stage", required=True, help="p0..p3 (knobs/stages.yaml)")
    parser.add_argument("--rung", required=True, help="a rung id (knobs/ladder/*.yaml)")
    parser.add_argument("--mode", default="colocate", help="colocate | non-colocate")
    parser.add_argument("--backend", default="embedded", help="embedded | vime | records")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="knobs directory")
    parser.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="override a VIME flag (name without dashes); repeatable")


def spec_from_args(args: argparse.Namespace):
    knobs = load_knobs(existing_dir(args.knobs, "--knobs", "a knobs directory (base.yaml, stages.yaml, ladder/, ...)"))
    spec = resolve(knobs, args.stage, args.rung, args.mode, args.backend, parse_sets(args.set))
    return knobs, validate(spec, knobs)
