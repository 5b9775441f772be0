"""Are the ladder's verdicts independent of the CPU's numeric setting? Run a stage's ladder twice on
this machine, under the default setting and under a second one, and compare every rung's verdict.

    python tools/machine_check.py [--stage p1] [--mode colocate] [--second ONEDNN_MAX_CPU_ISA=AVX2 ...]

The second setting (default: ONEDNN_MAX_CPU_ISA=AVX2 and VLLM_CPU_OMP_THREADS_BIND=0) changes what
the kernels compute with: oneDNN limited to AVX2 instead of the machine's widest ISA (another
blocking and rounding in bf16 GEMMs), and one OpenMP thread bound to core 0 instead of every core
(vLLM's CPU worker binds the process's threads; another reduction split). Each setting has its own
runs directory, so no run of one is reused by the other: the default setting's is the experiment's
own (reports/runs, so runs `make baseline` made are judged again, not rerun).

A rung's verdict is what its test decides (docs/statistics.md, machine independence): whether the
rung met its file's expectation (its test passed), its decided drift class, and its direction
against the parent when the interval decided one (up, down or flat). "inconclusive" is no
direction decision, so inconclusive under one setting and flat (or up) under the other is a
difference in decisiveness, reported as such, not a contradiction; up vs flat, up vs down, a class
or an expectation result that differs is. The check passes when no rung's verdicts contradict.
Writes reports/machine-check/{default,second}/ (each session's summary, experiment record and
junit results) and reports/machine-check/comparison.{json,md}; exits 1 when a verdict contradicts,
a rung's expectation result is unknown, or a session made none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
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
        f"--junitxml={out / 'junit.xml'}",
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
    outcomes = junit_outcomes(out / "junit.xml")
    rungs = json.loads(record.read_text()).get("rungs", [])
    return {
        entry["rung"]: {**entry, "expectation": outcomes.get((entry.get("test") or {}).get("name"), "unknown")}
        for entry in rungs
        if entry.get("stage") == args.stage
    }


def junit_outcomes(junit: Path) -> dict[str, str]:
    """{test name: 'met' | 'not met'} from a pytest session's junit results: the rung's test is its expectation result."""
    if not junit.exists():
        return {}
    outcomes = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        failed = any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        outcomes[case.get("name")] = "not met" if failed else "not checked" if skipped else "met"
    return outcomes


DECISIVE = ("up", "down", "flat")


def verdict(entry: dict | None) -> dict | None:
    """The rung's expectation result, its drift class, and its direction (None: no direction decision)."""
    if entry is None:
        return None
    direction = entry.get("observed_direction")
    return {
        "expectation": entry.get("expectation", "unknown"),
        "class": entry.get("decided_class"),
        "direction": direction if direction in DECISIVE else None,
        "ruled_out": sorted(entry.get("ruled_out") or {}),
    }


UNDECIDED_CLASSES = ("undetermined", "undecided")


def _class_difference(a: dict, b: dict) -> tuple[bool, str]:
    """Classes must be equal; a class decided under one setting only (the other undetermined or
    undecided) is a difference in decisiveness, unless the undecided side's evidence rules out the
    class the other side decided: that is a contradiction."""
    if a["class"] == b["class"]:
        return True, ""
    if a["class"] in UNDECIDED_CLASSES or b["class"] in UNDECIDED_CLASSES:
        undecided, decided = (a, b) if a["class"] in UNDECIDED_CLASSES else (b, a)
        if decided["class"] not in UNDECIDED_CLASSES and decided["class"] not in undecided["ruled_out"]:
            return True, f"decisiveness: class {a['class']} vs {b['class']}"
    return False, f"class {a['class']} vs {b['class']}"


def difference(a: dict | None, b: dict | None) -> tuple[bool, str]:
    """(agree, what differs): expectation results and classes must be equal, two decided directions
    equal; a direction decided under one setting only is a difference in decisiveness."""
    if a is None or b is None:
        return False, "judged under one setting only"
    known = ("met", "not met")  # an expectation not checked (or not found) is never an agreement
    if a["expectation"] != b["expectation"] or a["expectation"] not in known:
        return False, f"expectation {a['expectation']} vs {b['expectation']}"
    classes_agree, class_note = _class_difference(a, b)
    if not classes_agree:
        return False, class_note
    if a["direction"] and b["direction"] and a["direction"] != b["direction"]:
        return False, f"direction {a['direction']} vs {b['direction']}"
    notes = [class_note] if class_note else []
    if a["direction"] != b["direction"]:
        notes.append(f"decisiveness: {a['direction'] or 'inconclusive'} vs {b['direction'] or 'inconclusive'}")
    return True, "; ".join(notes)


def compare(first: dict[str, dict], second: dict[str, dict]) -> tuple[list[dict], bool]:
    rows, same = [], bool(first) and bool(second)
    for rung in sorted(set(first) | set(second)):
        a, b = first.get(rung), second.get(rung)
        agree, what = difference(verdict(a), verdict(b))
        same = same and agree
        rows.append(
            {
                "rung": rung,
                "default": {
                    "mean": a and a.get("mean"),
                    "delta": a and a.get("delta"),
                    "outcome": a and a.get("observed_direction"),
                    "verdict": verdict(a),
                },
                "second": {
                    "mean": b and b.get("mean"),
                    "delta": b and b.get("delta"),
                    "outcome": b and b.get("observed_direction"),
                    "verdict": verdict(b),
                },
                "agree": agree,
                "difference": what,
            }
        )
    return rows, same


def _figure(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _moved(a, b) -> str:
    return "-" if a is None or b is None or not a else f"{(b - a) / abs(a):+.1%}"


def _verdict_text(side: dict) -> str:
    v = side["verdict"]
    return "-" if v is None else f"{side['outcome']} / {v['class']} / expectation {v['expectation']}"


def markdown(rows: list[dict], second: dict[str, str]) -> str:
    lines = [
        f"Second setting: {' '.join(f'{k}={v}' for k, v in second.items())}",
        "",
        "| rung | mean (default) | mean (second) | moved | delta vs parent (default) | delta (second) | verdict (default) | verdict (second) | agree |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        a, b = row["default"], row["second"]
        agree = ("yes" if row["agree"] else "NO") + (f" ({row['difference']})" if row["difference"] else "")
        lines.append(
            f"| {row['rung']} | {_figure(a['mean'])} | {_figure(b['mean'])} | {_moved(a['mean'], b['mean'])} | {_figure(a['delta'])} | "
            f"{_figure(b['delta'])} | {_verdict_text(a)} | {_verdict_text(b)} | {agree} |"
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
    print("no verdict contradicts between the settings" if same else "VERDICTS CONTRADICT (or a session made none): see the table", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
