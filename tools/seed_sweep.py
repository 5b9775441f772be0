"""The seed sweep: the main job's judged questions again under K experiment seeds (an offset on the
stage seed, pytest's --seed-offset), then per question how many seeds gave the expected answer and
the smallest margin (standard errors from its decision boundary) any of them showed.

    .venv/bin/python tools/seed_sweep.py                      # the offsets of knobs/design.yaml seeds.sweep_offsets
    .venv/bin/python tools/seed_sweep.py --offsets 100,200    # others
    .venv/bin/python tools/seed_sweep.py --summarize-only     # re-read the records of an earlier sweep

Each offset is one pytest session of the main job's selection (the Makefile's baseline target) with its
own record under reports/sweep/offset-<N>/ (Allure results, summary.md, experiment/experiment.json);
runs are cached in reports/runs like any other. It prints the table and writes reports/sweep/sweep.md
and sweep.json; `python -m harness results --add reports/sweep/sweep.json` commits it for docs/results.md.
Exit status 0 when every expected answer held under every offset, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.report.answers import is_expected, margin_text  # noqa: E402
from harness.report.experiment_record import RecordError, load_record  # noqa: E402
from harness.report.record_model import Margin  # noqa: E402

MAIN_JOB = "p1 or acceptance or (p3 and ab)"  # the Makefile's baseline selection
SWEEP_DIR = REPO / "reports" / "sweep"


def run_offset(offset: int, mode: str) -> tuple[int, float]:
    folder = SWEEP_DIR / f"offset-{offset}"
    command = [
        str(REPO / ".venv" / "bin" / "python"),
        "-m",
        "pytest",
        "-m",
        MAIN_JOB,
        f"--mode={mode}",
        f"--seed-offset={offset}",
        f"--alluredir={folder / 'allure-results'}",
        "--clean-alluredir",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    print(f"[sweep] offset {offset:+d}: {' '.join(command[2:])}", flush=True)
    started = time.monotonic()
    status = subprocess.call(command, cwd=REPO)
    return status, time.monotonic() - started


def summarize(offsets: list[int]) -> tuple[list[dict], list[str]]:
    """One row per expected answer: seeds that held it, the smallest margin, where it did not hold."""
    by_key: dict[str, dict] = {}
    problems = []
    for offset in offsets:
        try:
            record = load_record(SWEEP_DIR / f"offset-{offset}" / "experiment")
        except RecordError as err:
            problems.append(f"offset {offset:+d}: {err}")
            continue
        for answer in record.answers:
            if not is_expected(answer):
                continue
            row = by_key.setdefault(
                answer.key, {"key": answer.key, "expected": answer.expected, "held": 0, "seeds": 0, "min_margin": None, "missed": []}
            )
            row["seeds"] += 1
            outcome = record.outcome(answer.test)
            if outcome == "passed":
                row["held"] += 1
            else:
                row["missed"].append(f"{offset:+d}: {answer.observed} ({outcome})")
            value = answer.margin.se_units if answer.margin is not None else None
            if isinstance(value, (int, float)) and value == value:
                row["min_margin"] = value if row["min_margin"] is None else min(row["min_margin"], value)
    return sorted(by_key.values(), key=lambda r: r["key"]), problems


def provenance(offsets: list[int]) -> dict:
    """The commits and machines the sweep's runs were made on, from each offset's own record (a
    `--summarize-only` from another checkout must not claim its own commit for old runs)."""
    from harness.records.environment import isa_text

    commits, machines, created = set(), set(), []
    for offset in offsets:
        try:
            record = load_record(SWEEP_DIR / f"offset-{offset}" / "experiment")
        except RecordError:
            continue
        created.append(record.created)
        for env in record.environment:
            commit, dirty = (env.harness.commit, env.harness.dirty) if env.harness else (None, None)
            commits.add((commit or "unknown")[:12] + (" (uncommitted changes)" if dirty else ""))
            cpu = env.hardware.cpu if env.hardware else None
            if cpu is not None and cpu.model_dump():  # an empty cpu part names no machine
                machines.add(f"{cpu.cores} cores, {cpu.model or 'unknown CPU'}, {isa_text(cpu.model_dump())}")
    # created: when the last offset's record was written (`python -m harness results --add` dates the sweep by it).
    return {"created": max(created, default=None), "commits": sorted(commits), "machines": sorted(machines)}


def render(rows: list[dict], offsets: list[int], made: dict) -> str:
    lines = [
        f"Seed sweep over offsets {', '.join(f'{o:+d}' for o in offsets)} on the judging seed (tools/seed_sweep.py)",
        "",
        f"Runs made at commit {', '.join(made['commits']) or 'unknown'} on {'; '.join(made['machines']) or 'an unrecorded machine'}.",
        "",
        "| Answer | Expected | Held | Smallest margin (SE) | Where it did not hold |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        margin = margin_text(Margin(se_units=row["min_margin"])) if row["min_margin"] is not None else "not measured"
        lines.append(f"| {row['key']} | {row['expected']} | {row['held']} of {row['seeds']} | {margin} | {'; '.join(row['missed'])} |")
    return "\n".join(lines) + "\n"


def _offsets(text: str | None) -> list[int]:
    if text is None:
        from harness import DEFAULT_KNOBS_DIR
        from harness.spec.design_file import load_design

        return list(load_design(DEFAULT_KNOBS_DIR).seeds.sweep_offsets)
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"seed_sweep: --offsets: expected comma-separated integers; got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offsets", help="comma-separated offsets on the stage seed (default: knobs/design.yaml seeds.sweep_offsets)")
    parser.add_argument("--mode", default="colocate", choices=("colocate", "non-colocate"))
    parser.add_argument("--summarize-only", action="store_true", help="read the records of an earlier sweep; launch nothing")
    args = parser.parse_args(argv)
    offsets = _offsets(args.offsets)
    durations = {}
    if not args.summarize_only:
        for offset in offsets:
            _, durations[offset] = run_offset(offset, args.mode)
    rows, problems = summarize(offsets)
    made = provenance(offsets)
    table = render(rows, offsets, made)
    SWEEP_DIR.mkdir(parents=True, exist_ok=True)
    (SWEEP_DIR / "sweep.md").write_text(table)
    (SWEEP_DIR / "sweep.json").write_text(
        json.dumps({"offsets": offsets, **made, "rows": rows, "problems": problems, "seconds": durations}, indent=1)
    )
    print(table)
    for problem in problems:
        print(f"seed_sweep: {problem}", file=sys.stderr)
    return 0 if rows and not problems and all(r["held"] == r["seeds"] == len(offsets) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
