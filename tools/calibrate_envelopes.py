"""Calibrate the boundary envelopes (docs/calibration.md): launch the calibration runs of
knobs/calibration.yaml (the aligned rungs and the numerical controls, as their specs are, at the
calibration seeds), read their boundary tables per captured sample, and derive the envelope
multiple k and the own-input check's multiple k_own (harness.attribution.envelope_calibration;
k_own also reads the own-check controls of knobs/calibration.yaml's `own:`).

    flock "$HEAVY_LOCK" .venv/bin/python tools/calibrate_envelopes.py --launch [--only NAME] [--seed N] [--max-minutes 6]
    .venv/bin/python tools/calibrate_envelopes.py --summarize [--write]      # launches nothing

--launch runs what is missing (a finished run is reused), one at a time, and starts none after
--max-minutes (the heavy lock's hold). --summarize finds every run (none launched), prints each
boundary's tokens, ratio and interval and the derived k; --write puts them under the marker line of
knobs/calibration.yaml with the date, machine and commit. thresholds.boundary_envelope_k and
boundary_own_k are then set by hand to the recorded k and k_own (tests/unit/test_envelope_calibration.py
holds each pair equal).
Bad input is one line and exit code 2; a calibration that derives no k says why and exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import DEFAULT_KNOBS_DIR, repo_relative  # noqa: E402
from harness.attribution import envelope_calibration as cal  # noqa: E402
from harness.spec import SpecError, load_knobs  # noqa: E402
from harness.spec.calibration_file import CALIBRATION_FILE, MARKER, Calibration, load_calibration  # noqa: E402
from harness.spec.measured_block import write_below_marker  # noqa: E402

DEFAULT_RUNS_DIR = ROOT / "reports" / "calibration" / "runs"
console = Console(stderr=True)


@dataclass(frozen=True)
class Planned:
    name: str  # an aligned rung's id, or a control's fault
    kind: str
    rung: str
    seed: int
    overrides: dict
    planted_at: str | None
    planted_side: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"


def plan(calibration: Calibration, only: list[str] | None, seeds: list[int] | None) -> list[Planned]:
    """Every calibration run: each aligned rung and each control at each calibration seed."""
    runs = calibration.runs
    wanted_seeds = seeds or calibration.seeds.seeds
    stray = sorted(set(wanted_seeds) - set(calibration.seeds.seeds))
    if stray:
        raise SpecError(
            f"--seed {stray[0]}: expected a calibration seed of knobs/{CALIBRATION_FILE} ({', '.join(map(str, calibration.seeds.seeds))})"
        )
    own = calibration.own
    sides = own.sides if own else {}
    items = [(rung, cal.ALIGNED, rung, {}, None, None) for rung in runs.aligned]
    items += [(fault, cal.CONTROL, runs.control_base, {"embedded-inject": fault}, at, sides.get(fault)) for fault, at in runs.controls.items()]
    if own:
        items += [(fault, cal.OWN_CONTROL, own.control_base, {"embedded-inject": fault}, c.at, c.side) for fault, c in own.controls.items()]
    names = [item[0] for item in items]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise SpecError(f"--only {unknown[0]}: expected an aligned rung or control of knobs/{CALIBRATION_FILE} ({', '.join(names)})")
    return [
        Planned(name, kind, rung, seed, {**overrides, "num-rollout": runs.num_rollout, "seed": seed}, at, side)
        for name, kind, rung, overrides, at, side in items
        if not only or name in only
        for seed in wanted_seeds
    ]


def _source(knobs, runs_dir: Path, find_only: bool):
    from harness.experiment.runs import LaunchSettings, RunSource

    return RunSource(knobs, "embedded", runs_dir, find_only=find_only, launch=LaunchSettings(session_started=time.time()))


def launch(knobs, calibration: Calibration, planned: list[Planned], runs_dir: Path, max_minutes: float) -> int:
    """Launch each planned run not yet finished, one at a time; none started after max_minutes."""
    source = _source(knobs, runs_dir, find_only=False)
    finder = _source(knobs, runs_dir, find_only=True)
    started, failed, left = time.monotonic(), [], []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("calibration runs", total=len(planned))
        for item in planned:
            try:
                finder(calibration.runs.stage, item.rung, calibration.runs.mode, **item.overrides)
                progress.console.print(f"{item.label}: recorded, reused")
                progress.advance(task)
                continue
            except SpecError:
                pass  # not recorded yet: launch it
            if (time.monotonic() - started) / 60 >= max_minutes:
                left.append(item.label)
                progress.advance(task)
                continue
            progress.update(task, description=f"running {item.label}")
            t0 = time.monotonic()
            try:
                run = source(calibration.runs.stage, item.rung, calibration.runs.mode, **item.overrides)
                progress.console.print(f"{item.label}: {run.id} in {time.monotonic() - t0:.0f} s")
            except Exception as err:  # noqa: BLE001 - one failed run is reported and the rest still run
                failed.append(f"{item.label}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
                progress.console.print(f"[red]{failed[-1]}")
            progress.advance(task)
    if left:
        console.print(f"not started (past --max-minutes {max_minutes:g}): {', '.join(left)}; run --launch again")
    return 1 if failed else 0


def read_run(run, item: Planned) -> cal.CalibrationRun:
    """The run's boundary table per captured sample: boundaries' own measure on each sample."""
    import torch

    from harness.attribution import boundaries
    from harness.embedded.capture import CaptureProblem, read_capture

    out = cal.CalibrationRun(run.id, item.name, item.kind, item.seed, item.planted_at, planted_side=item.planted_side)
    files = sorted((run.path / "dumps").glob("capture_*.pt"))
    if not files:
        raise SpecError(f"{run.path}: no dumps/capture_*.pt (a calibration run captures at rollout 2)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as boundaries.boundary_table: tiny operands
    try:
        for path in files:
            try:
                bundle = read_capture(path)
            except CaptureProblem as err:
                raise SpecError(str(err)) from None
            if bundle.get("weights") is None:
                raise SpecError(f"{path}: the capture holds no weights ({'; '.join(bundle['unavailable'])})")
            for sample in bundle["samples"]:
                if sample.get("trainer") is None or sample.get("rollout") is None:
                    raise SpecError(f"{path}: sample {sample.get('index')} lacks a side ({'; '.join(bundle['unavailable'])})")
                pooled, own = {}, {}
                boundaries._measure({**bundle, "samples": [sample]}, pooled, own)  # noqa: SLF001 - the table's own per-sample measure
                for name, (d, e, _) in pooled.items():
                    d, e = torch.cat(d).double(), torch.cat(e).double()
                    positions = int(sample["trainer"]["logits" if name.startswith("logits") else name].shape[0])
                    out.boundaries.setdefault(name, []).append(cal.SampleSums(float(d.sum()), float(e.sum()), int(d.numel()), positions))
                    for side, (r, o) in own.get(name, {}).items():
                        r, o = torch.cat(r).double(), torch.cat(o).double()
                        out.own.setdefault(name, {}).setdefault(side, []).append(
                            cal.SampleSums(float(r.sum()), float(o.sum()), int(r.numel()), positions)
                        )
    finally:
        torch.set_num_threads(threads)
    return out


def summarize(knobs, calibration: Calibration, planned: list[Planned], runs_dir: Path) -> tuple[list[cal.RungFigures], list[str], list[str]]:
    """Each planned run's boundary table per sample, pooled per rung; the runs not recorded; the
    harness commits and machines the runs were made at (their environment.json)."""
    import json

    from harness.experiment.runs import RunNotFound

    finder = _source(knobs, runs_dir, find_only=True)
    runs, missing, commits, machines = [], [], set(), set()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), console=console) as progress:
        task = progress.add_task("reading boundary tables", total=len(planned))
        for item in planned:
            try:
                run = finder(calibration.runs.stage, item.rung, calibration.runs.mode, **item.overrides)
                runs.append(read_run(run, item))
                environment = json.loads((run.path / "environment.json").read_text())
                made_at, cpu = environment.get("harness") or {}, (environment.get("hardware") or {}).get("cpu") or {}
                commits.add(f"{made_at.get('commit')}" + (" (dirty tree)" if made_at.get("dirty") else ""))
                machines.add(_machine(cpu))
            except RunNotFound:
                missing.append(item.label)
            except SpecError as err:
                missing.append(f"{item.label}: {err.problems[0]}")
            except (OSError, ValueError) as err:
                missing.append(f"{item.label}: environment.json unreadable ({err})")
            progress.advance(task)
    return cal.rung_figures(runs, calibration.interval.confidence, calibration.interval.resamples), missing, sorted(commits), sorted(machines)


def _machine(cpu: dict) -> str:
    settings = cpu.get("isa_settings") or {}
    return f"{cpu.get('model')}, {cpu.get('cores')} cores, {cpu.get('memory_gib')} GiB, {cpu.get('isa')}" + (
        f", under {settings}" if settings else ""
    )


def _sig(value: float) -> float:
    return float(f"{value:.4g}")


def record(calibration: Calibration, rungs: list[cal.RungFigures], runs_dir: Path, commits: list[str], machines: list[str]) -> dict:
    """What --write puts under the marker line: figures rounded to 4 significant digits, and k
    derived from the rounded figures (so the record's own numbers give its k)."""
    summarized_at = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = {}
    for r in rungs:
        rows[r.rung] = {
            "kind": r.kind,
            "planted_at": r.planted_at,
            "seeds": r.seeds,
            "runs": r.runs,
            "boundaries": {
                name: {"tokens": est.tokens, "samples": est.samples, "ratio": _sig(est.ratio), "low": _sig(est.low), "high": _sig(est.high)}
                for name, est in r.boundaries.items()
            },
            # each run's own ratio at the boundary the rule reads for this rung: the seeds' spread
            "per_run": {run: _sig(max(v.values()) if r.kind == cal.ALIGNED else v[r.planted_at]) for run, v in r.per_run.items()},
        }
        if r.own:
            rows[r.rung]["planted_side"] = r.planted_side
            rows[r.rung]["own"] = {
                name: {
                    side: {"tokens": est.tokens, "samples": est.samples, "ratio": _sig(est.ratio), "low": _sig(est.low), "high": _sig(est.high)}
                    for side, est in sides.items()
                }
                for name, sides in r.own.items()
            }
            # each run's own ratio where k_own reads this rung: an aligned rung's largest, a control's at its boundary and side
            rows[r.rung]["own_per_run"] = {
                run: _sig(
                    max(x for sides in v.values() for x in sides.values())
                    if r.kind == cal.ALIGNED
                    else v.get(r.planted_at, {}).get(r.planted_side, float("nan"))
                )
                for run, v in r.own_per_run.items()
            }
    out = {
        "date": dt.date.today().isoformat(),
        "machines": machines,  # where the runs were made (their environment.json)
        "runs_made_at": commits,  # the harness commit each run's environment.json records
        "summarized_at": summarized_at,
        "runs_dir": repo_relative(runs_dir),
        "seeds": calibration.seeds.seeds,
        "stage": calibration.runs.stage,
        "num_rollout": calibration.runs.num_rollout,
        "interval": f"{calibration.interval.confidence:g} percentile bootstrap over samples, {calibration.interval.resamples} resamples",
        "rungs": rows,
    }
    k = cal.derive_k(recorded_figures(out), calibration.runs.min_tokens)
    out["k"] = {
        "value": k.value,
        "rule": "sqrt(A x C) to 2 significant digits: A the largest upper bound on an aligned rung, C the smallest lower bound of a control at its planted boundary",
        "aligned_upper": k.aligned_upper,
        "aligned_at": k.aligned_at,
        "control_lower": k.control_lower,
        "control_at": k.control_at,
        "factor_each_side": _sig(k.factor),
    }
    # k_own where knobs/calibration.yaml says which side each control is planted in and the runs were read with their own ratios
    if calibration.own is not None and any(r.own for r in rungs):
        own = cal.derive_own_k(recorded_own_figures(out), calibration.runs.min_tokens)
        out["k_own"] = {
            "value": own.value,
            "rule": "sqrt(A_own x C_own) to 2 significant digits: A_own the largest upper bound of a side's own ratio on an aligned rung, "
            "C_own the smallest lower bound of a control's own ratio at its planted boundary and side",
            "aligned_upper": own.aligned_upper,
            "aligned_at": own.aligned_at,
            "control_lower": own.control_lower,
            "control_at": own.control_at,
            "factor_each_side": _sig(own.factor),
        }
    return out


def recorded_figures(measured: dict) -> list[cal.Figure]:
    """The figures of a record (knobs/calibration.yaml measured:) as the rule reads them."""
    return [
        cal.Figure(rung, row["kind"], name, int(b["tokens"]), float(b["ratio"]), float(b["low"]), float(b["high"]), row.get("planted_at"))
        for rung, row in (measured.get("rungs") or {}).items()
        for name, b in row["boundaries"].items()
    ]


def recorded_own_figures(measured: dict) -> list[cal.Figure]:
    """The own-input figures of a record, with their sides, as derive_own_k reads them."""
    return [
        cal.Figure(
            rung,
            row["kind"],
            name,
            int(b["tokens"]),
            float(b["ratio"]),
            float(b["low"]),
            float(b["high"]),
            row.get("planted_at"),
            side,
            row.get("planted_side"),
        )
        for rung, row in (measured.get("rungs") or {}).items()
        for name, sides in (row.get("own") or {}).items()
        for side, b in sides.items()
    ]


def write_record(knobs_dir: Path, measured: dict) -> Path:
    return write_below_marker(knobs_dir / CALIBRATION_FILE, MARKER, {"measured": measured}, width=140, default_flow_style=None)


def show(rungs: list[cal.RungFigures]) -> None:
    table = Table(title="boundary ratio (mean divergence / mean envelope), pooled over the calibration seeds")
    for column in ("rung", "boundary", "tokens", "ratio", "interval"):
        table.add_column(column)
    for r in rungs:
        for name, est in r.boundaries.items():
            if r.kind != cal.ALIGNED and name != r.planted_at:
                continue
            table.add_row(
                r.rung + ("" if r.kind == cal.ALIGNED else f" ({r.kind})"),
                name,
                str(est.tokens),
                f"{est.ratio:.3g}",
                f"[{est.low:.3g}, {est.high:.3g}]",
            )
    Console().print(table)
    own = Table(title="own-input ratio (each side's |y - f64(x)| / |f_declared(x) - f64(x)| on its own inputs), pooled over the seeds")
    for column in ("rung", "boundary", "side", "tokens", "ratio", "interval"):
        own.add_column(column)
    for f in cal.own_figures_of(rungs):
        if f.kind != cal.ALIGNED and (f.boundary, f.side) != (f.planted_at, f.planted_side):
            continue
        own.add_row(
            f.rung + ("" if f.kind == cal.ALIGNED else f" ({f.kind})"),
            f.boundary,
            f.side,
            str(f.tokens),
            f"{f.ratio:.3g}",
            f"[{f.low:.3g}, {f.high:.3g}]",
        )
    Console().print(own)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/calibrate_envelopes.py", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--launch", action="store_true", help="launch the calibration runs not yet recorded (wrap in the heavy lock)")
    what.add_argument("--summarize", action="store_true", help="read the recorded runs (launch nothing); print the figures and k")
    parser.add_argument("--only", action="append", help="an aligned rung or control of knobs/calibration.yaml (repeatable)")
    parser.add_argument("--seed", action="append", type=int, help="one calibration seed (repeatable; default: all)")
    parser.add_argument("--max-minutes", type=float, default=6.0, help="start no run after this long (default 6: one hold of the heavy lock)")
    parser.add_argument(
        "--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help=f"where the calibration runs live (default {DEFAULT_RUNS_DIR.relative_to(ROOT)})"
    )
    parser.add_argument("--knobs", type=Path, default=DEFAULT_KNOBS_DIR, help="knobs directory")
    parser.add_argument("--write", action="store_true", help="with --summarize: write the record under knobs/calibration.yaml's marker line")
    args = parser.parse_args(argv)
    try:
        knobs, calibration = load_knobs(args.knobs), load_calibration(args.knobs)
        planned = plan(calibration, args.only, args.seed)
        if args.launch:
            return launch(knobs, calibration, planned, args.runs_dir.resolve(), args.max_minutes)
        rungs, missing, commits, machines = summarize(knobs, calibration, planned, args.runs_dir.resolve())
    except SpecError as err:
        print("error: " + "; ".join(err.problems), file=sys.stderr)
        return 2
    show(rungs)
    if missing:
        print(f"not recorded in {args.runs_dir} (no k; run --launch): " + "; ".join(missing), file=sys.stderr)
        return 1
    try:
        measured = record(calibration, rungs, args.runs_dir.resolve(), commits, machines)
    except cal.NoK as err:
        print(f"no k: {err}", file=sys.stderr)
        return 1
    print(
        f"k = {measured['k']['value']:g} (A = {measured['k']['aligned_upper']:.4g} at {measured['k']['aligned_at']}, C = {measured['k']['control_lower']:.4g} at {measured['k']['control_at']})"
    )
    if "k_own" in measured:
        o = measured["k_own"]
        print(
            f"k_own = {o['value']:g} (A_own = {o['aligned_upper']:.4g} at {o['aligned_at']}, C_own = {o['control_lower']:.4g} at {o['control_at']})"
        )
    if args.write:
        print(f"wrote {write_record(args.knobs, measured)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
