"""`python -m harness sweep`: the confirmatory seed sweep, on offsets never judged before.

    python -m harness sweep                    # knobs/design.yaml seeds.sweep_offsets, each judged once
    python -m harness sweep --offsets 600,700  # others, never spent
    python -m harness sweep --summarize        # re-read the records of the offsets given; launch nothing

Each offset is one main job (the Makefile's baseline selection) at the judging seed plus the offset,
with its own record under reports/sweep/offset-<N>/; then, per expected answer, how many offsets held
it and the smallest margin any showed (reports/sweep/sweep.md, sweep.json; `python -m harness results
--add reports/sweep/sweep.json` commits it for docs/results.md). Exit 0 when every expected answer held
at every offset.

What makes it confirmatory (docs/statistics.md, "The seed sweep"):
* an offset in knobs/sweep_ledger.yaml is refused: its seeds were judged before, by an earlier set of
  expectations or the same one; the ledger gets each offset as it starts (so a killed sweep spends it
  too) and its result when it ends - commit the ledger with the results;
* the pre-registration hash (harness.judge.preregistration) is taken once at the start and checked
  before every offset: a change to any expectation, threshold, replicate count or pair count midway
  stops the sweep (a changed design is a new pre-registration, judged on offsets never spent);
* all K offsets run to the end; nothing is re-run or added to an offset that did not hold.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from pydantic import ValidationError

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import SpecError

SWEEP_DIR = REPO_ROOT / "reports" / "sweep"


def _pre_registration(knobs_dir: Path) -> tuple[str, object]:
    from harness.judge.preregistration import expectations_hash
    from harness.spec import load_knobs
    from harness.spec.design_file import load_design

    return expectations_hash(load_knobs(knobs_dir), load_design(knobs_dir)), load_design(knobs_dir)


def offsets_to_judge(knobs_dir: Path, given: list[int] | None) -> list[int]:
    """The offsets this sweep judges: refused when any was judged before (the ledger) or its seeds
    reach another range of knobs/design.yaml (the design's own check)."""
    from harness.spec.design_file import load_design
    from harness.spec.sweep_ledger import LEDGER_FILE, load_ledger

    design = load_design(knobs_dir)
    offsets = list(given) if given else list(design.seeds.sweep_offsets)
    spent = sorted(set(offsets) & load_ledger(knobs_dir).offsets())
    if spent:
        raise SpecError(
            f"{knobs_dir / LEDGER_FILE}: spent: offsets {', '.join(f'{o:+d}' for o in spent)} were judged before; "
            "a confirmatory sweep takes offsets never judged (set knobs/design.yaml seeds.sweep_offsets to new ones)"
        )
    if given:
        data = design.model_dump()
        data["seeds"]["sweep_offsets"] = offsets
        try:
            type(design).model_validate(data)
        except ValidationError as err:
            raise SpecError(f"--offsets {','.join(map(str, offsets))}: {err.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    return offsets


def _record_start(knobs_dir: Path, offset: int, span: int, sha: str, sweep: str) -> None:
    from harness.spec.design_file import load_design
    from harness.spec.sweep_ledger import SpentOffset, load_ledger, write_ledger

    ledger = load_ledger(knobs_dir)
    judging = load_design(knobs_dir).seeds.judging
    seeds = [judging + offset, judging + offset + span - 1]
    entry = SpentOffset(offset=offset, seeds=seeds, sweep=sweep, expectations_sha256=sha)
    write_ledger(knobs_dir, ledger.model_copy(update={"spent": [*ledger.spent, entry]}))


def _record_result(knobs_dir: Path, offset: int, result: str) -> None:
    from harness.spec.sweep_ledger import load_ledger, write_ledger

    ledger = load_ledger(knobs_dir)
    spent = [e.model_copy(update={"result": result}) if e.offset == offset and e.result == "started" else e for e in ledger.spent]
    write_ledger(knobs_dir, ledger.model_copy(update={"spent": spent}))


def run_offset(offset: int, mode: str) -> tuple[int, float]:
    """One main job at the offset, without pytest (`python -m harness baseline`: the Session decides
    every check the Makefile's selection holds), its record under reports/sweep/offset-<N>/."""
    command = [sys.executable, "-m", "harness", "baseline", f"--mode={mode}", f"--seed-offset={offset}", f"--out={SWEEP_DIR / f'offset-{offset}'}"]
    print(f"[sweep] offset {offset:+d}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    status = subprocess.call(command, cwd=REPO_ROOT)
    return status, time.monotonic() - started


def summarize(offsets: list[int]) -> tuple[list[dict], list[str]]:
    """One row per expected answer: the offsets that held it, the smallest margin, where it did not hold."""
    from harness.report.answers import is_expected
    from harness.report.experiment_record import RecordError, load_record

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
    `--summarize` from another checkout must not claim its own commit for old runs), and when the last
    offset's record was written (`python -m harness results --add` dates the sweep by it)."""
    from harness.records.environment import isa_text
    from harness.report.experiment_record import RecordError, load_record

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
    return {"created": max(created, default=None), "commits": sorted(commits), "machines": sorted(machines)}


def render(rows: list[dict], offsets: list[int], sha: str) -> str:
    from harness.report.answers import margin_text
    from harness.report.record_model import Margin

    lines = [
        f"Confirmatory seed sweep over offsets {', '.join(f'{o:+d}' for o in offsets)} (python -m harness sweep); pre-registration sha256 {sha}",
        "",
        "| Answer | Expected | Held | Smallest margin (SE) | Where it did not hold |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        margin = margin_text(Margin(se_units=row["min_margin"])) if row["min_margin"] is not None else "not measured"
        lines.append(f"| {row['key']} | {row['expected']} | {row['held']} of {row['seeds']} | {margin} | {'; '.join(row['missed'])} |")
    return "\n".join(lines) + "\n"


def cmd_sweep(args: argparse.Namespace) -> int:
    knobs_dir = Path(args.knobs)
    given = [int(part) for part in args.offsets.split(",") if part.strip()] if args.offsets else None
    sha, design = _pre_registration(knobs_dir)
    if args.summarize:
        offsets = given or list(design.seeds.sweep_offsets)
    else:
        offsets = offsets_to_judge(knobs_dir, given)
        span = len(design.seed_ranges()["seeds.judging"])
        sweep = f"python -m harness sweep, {date.today().isoformat()}, offsets {','.join(map(str, offsets))}"
        seconds = {}
        for offset in offsets:
            now, _ = _pre_registration(knobs_dir)
            if now != sha:
                raise SpecError(
                    f"{knobs_dir}: the expectations or thresholds changed since the sweep started (sha256 {sha[:12]} -> {now[:12]}): "
                    "a change midway is a new pre-registration; start a new sweep on offsets never judged"
                )
            _record_start(knobs_dir, offset, span, sha, sweep)
            status, seconds[str(offset)] = run_offset(offset, args.mode)
            _record_result(knobs_dir, offset, f"main job exit {status} in {seconds[str(offset)] / 60:.1f} min")
    rows, problems = summarize(offsets)
    table = render(rows, offsets, sha)
    SWEEP_DIR.mkdir(parents=True, exist_ok=True)
    (SWEEP_DIR / "sweep.md").write_text(table)
    made = provenance(offsets)
    summary = {"offsets": offsets, "expectations_sha256": sha, **made, "rows": rows, "problems": problems}
    if not args.summarize:
        summary["seconds"] = seconds
    # `python -m harness results --add reports/sweep/sweep.json` commits it for docs/results.md.
    (SWEEP_DIR / "sweep.json").write_text(json.dumps(summary, indent=1))
    print(table)
    for problem in problems:
        print(f"sweep: {problem}", file=sys.stderr)
    if not args.summarize:
        print(f"the offsets are spent: commit {knobs_dir / 'sweep_ledger.yaml'} with the results", file=sys.stderr)
    return 0 if rows and not problems and all(r["held"] == r["seeds"] == len(offsets) for r in rows) else 1


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="the confirmatory seed sweep: the main job at offsets never judged before, recorded in knobs/sweep_ledger.yaml"
    )
    parser.add_argument("--offsets", help="comma-separated offsets on the judging seed (default: knobs/design.yaml seeds.sweep_offsets)")
    parser.add_argument("--mode", default="colocate", choices=("colocate", "non-colocate"))
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="the knobs directory (the experiment spec)")
    parser.add_argument("--summarize", action="store_true", help="re-read the records of the offsets given; launch nothing")
    parser.set_defaults(func=cmd_sweep)
