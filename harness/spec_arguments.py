"""The arguments that pick one resolved spec (--stage, --rung, --mode, --backend, --knobs, --site,
--set), shared by the `argv` and `run` commands: one place, so the CLI and the launcher's command do
not import each other."""

from __future__ import annotations

import argparse

from harness import DEFAULT_KNOBS_DIR
from harness.arguments import existing_dir, existing_path
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
    add_site_argument(parser)
    add_set_argument(parser)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="set a VIME flag (name without dashes) over knobs/ and the site file; repeatable. A flag a rung sets is "
        "refused unless the site file lists it under overrides-rungs",
    )


def add_site_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", default=None, metavar="FILE", help="a site file: this cluster's paths, Ray address, nodes (docs/cluster.md)")


def site_from_args(args: argparse.Namespace):
    """The site file named by --site, loaded and checked (None without one)."""
    from harness.spec.site import load_site

    if getattr(args, "site", None) is None:
        return None
    return load_site(existing_path(args.site, "--site", "a site file (YAML; see knobs/sites/example.yaml)"))


def knobs_from_args(args: argparse.Namespace):
    """knobs/ with the site file and --set values layered on."""
    from harness.spec.site import with_settings

    knobs = load_knobs(existing_dir(args.knobs, "--knobs", "a knobs directory (base.yaml, stages.yaml, ladder/, ...)"))
    return with_settings(knobs, site_from_args(args), parse_sets(getattr(args, "set", []) or []))


def spec_from_args(args: argparse.Namespace):
    knobs = knobs_from_args(args)
    spec = resolve(knobs, args.stage, args.rung, args.mode, args.backend)
    return knobs, validate(spec, knobs)


def site_default(value, site, key: str, fallback=None):
    """An option's value: given on the command line, else the site file's, else the fallback."""
    if value is not None:
        return value
    return getattr(site, key, None) or fallback
