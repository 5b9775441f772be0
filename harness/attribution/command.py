"""`python -m harness attribute RUN_DIR [--json]`: the seven probes and the token audit of a finished run.

Prints each probe's verdict, the decided drift class (and the probe that decided it), then the
audit's token-weighted and sample-mean figures. `--json` prints one object with at least `class`
and `decided_by`, plus `label` ("undecided: needs ..."), `needs`, `probes`, `boundary`, `audit`,
`boundary_table` (both engines' tensors against their envelopes, with the class they decide) and
`warnings`; each probe carries its `basis` (kind: recorded / declarations / none, and what it was
computed from). `--replay-run DIR`: a run of the same spec with the processed-contract replay on (the
ladder's processed-replay run of the rung): probe 6 reports the share of the drift it measured removed. Exit 0 when the probes ran (whatever they decided); 1 when the run has no readable
dump (class "undecided: no readable dump": nothing was checked); 2 with one line when the run
directory cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import DEFAULT_KNOBS_DIR
from harness.arguments import existing_dir
from harness.records.rundir import RunDir
from harness.spec import SpecError, load_knobs

STATUS_STYLE = {"pass": "green", "fail": "red", "not checked": "yellow", "not measured": "dim"}


def register(subparsers) -> None:
    parser = subparsers.add_parser("attribute", help="run the seven attribution probes and the dlogp audit on a run directory")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (reports/runs/<id>/)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="knobs directory whose thresholds.yaml the probes judge by")
    parser.add_argument(
        "--replay-run",
        metavar="DIR",
        help="a run directory of the same spec with the processed-logprob replay on: probe 6 takes the share of the drift it measured removed",
    )
    parser.set_defaults(func=cmd_attribute)


def _audit_summary(audit) -> dict:
    data = audit.model_dump(exclude={"per_step", "worst_tokens", "correlations", "warnings"})
    data["per_step"] = audit.table()
    data["worst_tokens"] = audit.worst_tokens
    data["correlations"] = audit.correlations
    return data


def cmd_attribute(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"error: {run_dir}: no such run directory (expected reports/runs/<id>/ with dumps/)", file=sys.stderr)
        return 2
    if not (run_dir / "dumps").is_dir():
        print(
            f"error: {run_dir}/dumps: missing; undecided: no readable dump (the probes need the run's token dumps; "
            "VIME: --save-debug-rollout-data and --save-debug-train-data)",
            file=sys.stderr,
        )
        return 2
    try:
        knobs = load_knobs(existing_dir(args.knobs, "--knobs", "a knobs directory (thresholds.yaml, ...)"))
    except SpecError as err:
        print("error: " + "\n  ".join(err.problems), file=sys.stderr)
        return 2
    # The probes and the audit import torch (seconds): only once the arguments have been checked.
    from harness.attribution.audit import audit_run
    from harness.attribution.probe_contract import ReplayRunProblem
    from harness.attribution.probes import run_probes

    run = RunDir(run_dir).load()  # loaded once; the probes and the audit share it
    replay_run = None
    if args.replay_run is not None:
        replay_dir = Path(args.replay_run)
        if not (replay_dir / "spec.yaml").is_file():
            print(f"error: --replay-run {replay_dir}: no spec.yaml (expected a run directory, reports/runs/<id>/)", file=sys.stderr)
            return 2
        replay_run = RunDir(replay_dir).load()
    try:
        report = run_probes(run, knobs, replay_run)
    except ReplayRunProblem as err:
        print(f"error: --replay-run: {err}", file=sys.stderr)
        return 2
    if report.needs == ["a readable dump"]:
        # Nothing was checked: say so and fail, never print a class the dumps could not support.
        reasons = "; ".join(report.warnings) or "no rollout_*.pt or train_*.pt dump"
        if args.json:
            print(
                json.dumps({"class": "undecided", "label": "undecided: no readable dump", "decided_by": None, "warnings": report.warnings}, indent=1)
            )
        else:
            print(f"class: undecided: no readable dump ({reasons})")
        return 1
    audit = audit_run(run)
    if args.json:
        data = report.to_json()
        data["audit"] = _audit_summary(audit)
        data["warnings"] = sorted(set(report.warnings) | set(audit.warnings), key=(report.warnings + audit.warnings).index)
        print(json.dumps(data, indent=1, default=str))
        return 0
    _print_text(report, audit)
    print(f"boundary table: {report.boundary_table.get('reason')}")
    return 0


def _print_text(report, audit) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(Console().width, 150))
    table = Table(title=f"attribution probes: {report.run}", show_lines=False)
    for column in ("#", "probe", "status", "verdict", "basis"):
        table.add_column(column, overflow="fold")
    for probe in report.probes:
        style = STATUS_STYLE[probe.status]
        table.add_row(str(probe.number), probe.name, f"[{style}]{probe.status}[/{style}]", probe.verdict, f"{probe.basis.kind}: {probe.basis.detail}")
    console.print(table)
    decided = report.decided_by_evidence or "nothing"
    console.print(f"class: [bold]{report.label}[/bold] (decided by {decided})" + (f"; boundary: {report.boundary}" if report.boundary else ""))
    steps = Table(title="dlogp audit per step (token-weighted rlk_audit_* and VIME's sample-mean)")
    for column in ("rollout", "tokens", "|dlogp| mean", "p50", "p90", "p99", "max", "sample-mean", "logged", "match"):
        steps.add_column(column, justify="right")

    def fmt(value):
        return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)

    for row in audit.per_step:
        steps.add_row(
            str(row.rollout_id),
            str(row.rlk_audit_active_token_count),
            fmt(row.rlk_audit_dlogp_abs_mean),
            fmt(row.rlk_audit_dlogp_abs_p50),
            fmt(row.rlk_audit_dlogp_abs_p90),
            fmt(row.rlk_audit_dlogp_abs_p99),
            fmt(row.rlk_audit_dlogp_abs_max),
            fmt(row.sample_mean_abs_diff),
            fmt(row.logged_abs_diff),
            fmt(row.matches_logged),
        )
    console.print(steps)
    signed = audit.signed
    if signed:
        rhos = ", ".join(f"{name} rho {value['spearman_rho']:+.3f}" for name, value in signed["correlations"].items())
        console.print(
            f"dlogp (trainer - rollout) over {signed['tokens']} tokens: signed mean {signed['dlogp_mean']:+.3g}, "
            f"|dlogp| mean {signed['dlogp_abs_mean']:.3g}; Spearman: {rhos or 'none computable'} "
            f"(entropy: {signed['entropy_source'] or 'none'})"
        )
    if audit.gate_metrics:  # verl's and NeMo-RL's gates on the abs-diff's own tokens (harness.attribution.gate_metrics)
        console.print("other frameworks' gates on the same tokens: " + ", ".join(f"{k} {fmt(v)}" for k, v in audit.gate_metrics.items()))
    for token in audit.worst_tokens[:3]:
        console.print(
            f"worst token: rollout {token['rollout_id']} sample {token['sample_position']} position "
            f"{token['token_position']} dlogp {token['dlogp']:+.3g} p={fmt(token['sampled_token_probability'])} "
            f"rank={fmt(token['sampled_token_rank'])} {token.get('context_text') or token.get('context_ids')}"
        )
    for warning in dict.fromkeys(report.warnings + audit.warnings):
        console.print(f"[yellow]warning:[/yellow] {warning}")
