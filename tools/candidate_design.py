"""The candidate operator's A/B on the design seeds: what each pair answers there, before any judged run.

    flock "$HEAVY_LOCK" .venv/bin/python tools/candidate_design.py [--write]

For each pair of knobs/candidate.yaml and its negative control, the runs at the design seeds
(knobs/design.yaml seeds.design .. + design_count - 1, never judged by `make candidate`) are found or
launched (harness.experiment.runs.RunSource, the tests' launcher) and judged by the same gate
(harness.experiment.candidate_ab), and printed with each answer's margin and the size of sample it
would need. The expectations in candidate.yaml are written from these answers, by hand, with their
reasons; --write records the measured answers below the marker of knobs/candidate.yaml (`measured:`)
so that every expectation names what it came from. The judging seeds never enter.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import DEFAULT_KNOBS_DIR, DEFAULT_RUNS_DIR  # noqa: E402
from harness.spec import load_knobs  # noqa: E402
from harness.spec.candidate_file import CANDIDATE_FILE  # noqa: E402
from harness.spec.design_file import load_design  # noqa: E402
from harness.spec.measured_block import write_below_marker  # noqa: E402

MARKER = "# --- measured by tools/candidate_design.py: do not edit by hand below this line ---"
MODE = "colocate"


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _short(answer) -> dict | None:
    if answer is None:
        return None
    margin = (answer.evidence or {}).get("margin") or {}
    return {
        "outcome": (answer.evidence or {}).get("outcome"),
        "baseline_mean": float(f"{answer.evidence.get('baseline_mean', float('nan')):.4g}"),
        "candidate_mean": float(f"{answer.evidence.get('candidate_mean', float('nan')):.4g}"),
        "ci": [float(f"{v:.4g}") for v in answer.evidence.get("ci", [])],
        "margin_se": None if margin.get("se_units") is None else round(float(margin["se_units"]), 2),
    }


def pairs_needed(answer, baseline, candidate, knobs, design) -> dict | None:
    """How many pairs the drift answer's observed outcome needs to reach the design's target margin
    (harness.judge.design.needed_pairs on the design pairs' per-step differences)."""
    import numpy as np

    from harness.judge import variance
    from harness.judge.design import needed_pairs, side_variance
    from harness.judge.verdict import after_warmup
    from harness.records.metric_names import ABS_DIFF

    outcome = (answer.evidence or {}).get("outcome") if answer else None
    if outcome not in ("up", "down", "flat"):
        return None
    warmup = int(knobs.threshold("warmup_steps"))
    means, within, steps = [], [], 0
    for a, b in zip(baseline, candidate):
        sa, va = after_warmup(a.series(ABS_DIFF), warmup)
        sb, vb = after_warmup(b.series(ABS_DIFF), warmup)
        common = sorted(set(sa) & set(sb))
        diff = np.asarray([dict(zip(sb, vb))[s] - dict(zip(sa, va))[s] for s in common])
        means.append(float(diff.mean()))
        within.append(variance.run_noise(diff, "paired difference").variance)
        steps = len(common)
    side = side_variance(means, within, steps)
    effect = answer.evidence["effect_of_interest"]  # the gate's own band for this pair (harness.judge.effects)
    need = needed_pairs(outcome, side, effect, design.target_margin_se, 1 - knobs.threshold("bootstrap_confidence"))
    return {"outcome": outcome, "pairs_needed": need.seeds, "margin_at_design_pairs": round(need.margin_at_measured, 2), "target": need.target}


def _paired(answer) -> dict | None:
    data = answer.paired_data()
    if data is None or "not_checked" in data:
        return data
    keep = ("delta", "low", "high", "se", "parent_mean", "child_mean", "sequences", "tokens", "outcome", "effect_of_interest")
    return {k: (float(f"{data[k]:.4g}") if isinstance(data[k], float) else data[k]) for k in keep}


def measure(knobs, runs_dir: Path, seeds: list[int], design) -> dict:
    from harness.experiment.candidate_ab import NEGATIVE_CONTROL, gather, judge_mixed_paths, judge_pair
    from harness.experiment.runs import LaunchSettings, RunSource

    source = RunSource(knobs, "embedded", runs_dir, launch=LaunchSettings(session_started=time.time()))
    out, answers = {}, {}
    for name in [*knobs.candidate.pairs, NEGATIVE_CONTROL]:
        started = time.monotonic()
        baseline, candidate = gather(knobs, name, lambda stage: source.fetcher(stage, MODE), len(seeds), seeds)
        answer = answers[name] = judge_pair(name, knobs, baseline, candidate, "embedded")
        print(f"{name}: {answer.label}", flush=True)
        if answer.drift is not None:
            print(f"  drift: {answer.drift.message}\n  reward: {answer.reward.message}", flush=True)
            print(f"  drift sample: {pairs_needed(answer.drift, baseline, candidate, knobs, design)}", flush=True)
            print(f"  paired: {answer.paired.summary() if answer.paired is not None else None}", flush=True)
            for row in answer.performance:
                print(f"  {row.text()}", flush=True)
        out[name] = {
            "runs": {"baseline": [r.id for r in baseline], "candidate": [r.id for r in candidate]},
            "contract": answer.contract,
            "drift": _short(answer.drift),
            "reward": _short(answer.reward),
            "drift_sample": pairs_needed(answer.drift, baseline, candidate, knobs, design),
            "paired": _paired(answer),
            "performance": {
                row.figure.key: [None if row.baseline is None else round(row.baseline, 4), None if row.candidate is None else round(row.candidate, 4)]
                for row in answer.performance
            },
            "seconds": round(time.monotonic() - started, 1),
        }
    mixed, _ = judge_mixed_paths(knobs, answers, "embedded")
    print(f"mixed paths: {mixed.message}", flush=True)
    out["mixed_paths"] = {"answer": mixed.answer, "message": mixed.message}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knobs", type=Path, default=DEFAULT_KNOBS_DIR)
    parser.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)
    parser.add_argument("--write", action="store_true", help=f"record the answers below the marker of knobs/{CANDIDATE_FILE}")
    args = parser.parse_args(argv)
    knobs, design = load_knobs(args.knobs), load_design(args.knobs)
    seeds = list(range(design.seeds.design, design.seeds.design + design.seeds.design_count))
    measured = {
        "date": dt.date.today().isoformat(),
        "machine": f"{_cpu()}, {len(os.sched_getaffinity(0))} cores",
        "seeds": seeds,
        "pairs": measure(knobs, args.runs_dir, seeds, design),
    }
    if args.write:
        print(f"wrote {write_below_marker(args.knobs / CANDIDATE_FILE, MARKER, {'measured': measured})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
