"""Where a finished job's run time went: its steps, and the rest of each run (start, model and
engine build, the last records); and what the job would take on a CPU whose steps are slower.

    .venv/bin/python tools/run_time_split.py reports/runs --job-wall 9m48s --slots 2 --step-factor 2.9

Prints a markdown table, one row per stage/rung (true on-policy runs apart), then the totals and
the projection. A run's wall time is status.json's started to ended; its step time the sum of its
perf/step_time. The projection adds, to the job's measured wall time, the extra step time
(step-factor - 1) and the extra rest (rest-factor - 1), spread over the slots the runs shared: it
holds when the runs kept every slot busy for the whole job (a session's planned batch does) and
the tests' own judging is not slowed alike. Why a split and not one factor: a slower CPU's steps
and a run's start need not slow alike (measure both ratios on the two hosts and pass them).
`--rest-factor` equal to `--step-factor` gives the pessimistic end, every second
of the job scaled alike.

Bad input is one `error:` line and exit code 2.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.records.rundir import RunDir  # noqa: E402
from harness.records.runload import load_run  # noqa: E402


def seconds(text: str) -> float:
    """'9m48s', '588s' or '588' -> seconds."""
    match = re.fullmatch(r"(?:(\d+)m)?(\d+(?:\.\d+)?)s?", text.strip())
    if not match:
        raise ValueError(f"--job-wall: expected a duration such as 9m48s or 588s, got {text!r}")
    return int(match.group(1) or 0) * 60 + float(match.group(2))


def clock(total: float) -> str:
    return f"{int(total // 60)} min {round(total % 60)} s"


def split(runs_dir: Path) -> tuple[dict[str, list[float]], list[str]]:
    """{group: [runs, wall, steps]} over the finished runs of runs_dir, and what was left out."""
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    left_out = []
    for path in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        run = load_run(RunDir(path))
        status = run.status
        if status is None or not (status.started and status.ended):
            left_out.append(f"{path.name}: {status.state if status else 'no status.json'}")
            continue
        wall = (datetime.fromisoformat(status.ended) - datetime.fromisoformat(status.started)).total_seconds()
        steps = sum(value for _, value in run.series("perf/step_time"))
        true_on_policy = bool((run.embedded_record or {}).get("true_on_policy"))
        group = f"{run.spec.stage}/{run.spec.rung}" + (" (true on-policy)" if true_on_policy else "")
        groups[group][0] += 1
        groups[group][1] += wall
        groups[group][2] += steps
    return groups, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, help="the job's runs, e.g. reports/runs of a fresh clone after make baseline")
    parser.add_argument("--job-wall", help="the job's measured wall time (9m48s); without it, no projection")
    parser.add_argument("--slots", type=int, default=2, help="runs launched at once during the job (default 2)")
    parser.add_argument(
        "--step-factor",
        type=float,
        default=2.9,
        help="the other CPU's step time over this one's (default 2.9: an AVX2-only EPYC's fp32 step over an AMX Xeon's, as measured once)",
    )
    parser.add_argument("--rest-factor", type=float, default=1.0, help="the same for the rest of a run (default 1.0)")
    args = parser.parse_args(argv)
    if not args.runs_dir.is_dir():
        print(f"error: {args.runs_dir}: not a directory of runs", file=sys.stderr)
        return 2
    try:
        job_wall = seconds(args.job_wall) if args.job_wall else None
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    groups, left_out = split(args.runs_dir)
    if not groups:
        print(f"error: {args.runs_dir}: no finished run", file=sys.stderr)
        return 2
    print("| runs of | runs | wall (s) | steps (s) | rest (s) |\n|---|---|---|---|---|")
    for group, (count, wall, steps) in sorted(groups.items()):
        print(f"| {group} | {count} | {wall:.0f} | {steps:.0f} | {wall - steps:.0f} |")
    count, wall, steps = (sum(values[i] for values in groups.values()) for i in range(3))
    print(f"| all | {count} | {wall:.0f} | {steps:.0f} | {wall - steps:.0f} |")
    if left_out:
        print(f"\nleft out (not finished): {', '.join(left_out)}")
    if job_wall is not None:
        extra = ((args.step_factor - 1) * steps + (args.rest_factor - 1) * (wall - steps)) / args.slots
        print(
            f"\njob {clock(job_wall)} here; steps x{args.step_factor:g}, rest x{args.rest_factor:g}, {args.slots} slots:"
            f" {clock(job_wall + extra)} (+{clock(extra)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
