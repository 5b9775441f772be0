"""Are the ladder's verdicts independent of the CPU's numeric setting? Run a stage's ladder twice on
this machine, under the default setting and under a second one, and compare every rung's verdict.

    python tools/machine_check.py [--stage p1] [--mode colocate] [--second ONEDNN_MAX_CPU_ISA=AVX2 ...]

The second setting (default: ONEDNN_MAX_CPU_ISA=AVX2 and VLLM_CPU_OMP_THREADS_BIND=0) changes what
the kernels compute with: oneDNN limited to AVX2 instead of the machine's widest ISA (another
blocking and rounding in bf16 GEMMs), and one OpenMP thread bound to core 0 instead of every core
(vLLM's CPU worker binds the process's threads; another reduction split). Each setting has its own
runs directory, so no run of one is reused by the other: the default setting's is the experiment's
own (reports/runs, so runs `make baseline` made are judged again, not rerun). A verdict is a rung's observed direction
and its decided drift class; the check passes when every rung's verdict is the same under both.
Writes reports/machine-check/{default,second}/ (each session's summary and experiment record) and
reports/machine-check/comparison.{json,md}; exits 1 when a verdict differs or a session made none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SECOND = ("ONEDNN_MAX_CPU_ISA=AVX2", "VLLM_CPU_OMP_THREADS_BIND=0")


def run_ladder(name: str, env_changes: dict[str, str], runs: Path, args) -> dict[str, dict]:
    """One pytest session of the stage's ladder; its experiment record's rungs, by rung id."""
    out = args.out / name
    command = [
        sys.executable,
        "-m",
        "pytest",
        "tests/ladder",
        "-m",
        args.stage,
        f"--mode={args.mode}",
        f"--runs-dir={runs}",
        f"--summary-dir={out}",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    print(f"[{name}] {' '.join(f'{k}={v}' for k, v in env_changes.items()) or 'default setting'}: {' '.join(command[2:])}", flush=True)
    env = dict(os.environ, **env_changes)
    for key in [k for k, v in env_changes.items() if v == ""]:
        env.pop(key)
    code = subprocess.call(command, cwd=REPO, env=env)
    record = out / "experiment" / "experiment.json"
    if not record.exists():
        print(f"[{name}] made no experiment record (pytest exit {code})", flush=True)
        return {}
    rungs = json.loads(record.read_text()).get("rungs", [])
    return {entry["rung"]: entry for entry in rungs if entry.get("stage") == args.stage}


def verdict(entry: dict | None) -> tuple[str, str] | None:
    return None if entry is None else (entry.get("observed_direction"), entry.get("decided_class"))


def compare(first: dict[str, dict], second: dict[str, dict]) -> tuple[list[dict], bool]:
    rows, same = [], bool(first) and bool(second)
    for rung in sorted(set(first) | set(second)):
        a, b = first.get(rung), second.get(rung)
        agree = verdict(a) == verdict(b) and a is not None
        same = same and agree
        rows.append(
            {
                "rung": rung,
                "default": {"mean": a and a.get("mean"), "delta": a and a.get("delta"), "verdict": verdict(a)},
                "second": {"mean": b and b.get("mean"), "delta": b and b.get("delta"), "verdict": verdict(b)},
                "same_verdict": agree,
            }
        )
    return rows, same


def _figure(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def markdown(rows: list[dict], second: dict[str, str]) -> str:
    lines = [
        f"Second setting: {' '.join(f'{k}={v}' for k, v in second.items())}",
        "",
        "| rung | mean (default) | mean (second) | delta vs parent (default) | delta (second) | verdict (default) | verdict (second) | same |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        a, b = row["default"], row["second"]
        lines.append(
            f"| {row['rung']} | {_figure(a['mean'])} | {_figure(b['mean'])} | {_figure(a['delta'])} | {_figure(b['delta'])} | "
            f"{' / '.join(a['verdict'] or ['-'])} | {' / '.join(b['verdict'] or ['-'])} | {'yes' if row['same_verdict'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="p1")
    parser.add_argument("--mode", default="colocate")
    parser.add_argument("--second", nargs="*", default=list(DEFAULT_SECOND), help="NAME=VALUE settings of the second session")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "machine-check")
    parser.add_argument("--runs-dir", type=Path, default=REPO / "reports" / "runs", help="the default setting's runs")
    parser.add_argument("--second-runs-dir", type=Path, default=REPO / "reports" / "runs-second-setting", help="the second setting's runs")
    args = parser.parse_args()
    second = {}
    for item in args.second:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"error: --second {item!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        second[name] = value
    first_verdicts = run_ladder("default", {}, args.runs_dir, args)
    second_verdicts = run_ladder("second", second, args.second_runs_dir, args)
    rows, same = compare(first_verdicts, second_verdicts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "comparison.json").write_text(json.dumps({"second_setting": second, "rungs": rows, "same": same}, indent=2))
    table = markdown(rows, second)
    (args.out / "comparison.md").write_text(table)
    print(table)
    print("verdicts identical under both settings" if same else "VERDICTS DIFFER (or a session made none): see the table", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
