"""False-alarm rate and power of the ladder's decision rule, simulated with the project's bootstrap.

    python tools/false_alarm_sim.py [--trials 400] [--runs-dir DIR]

Series are shaped like the real P1 runs: 28 judged steps, the near-aligned rung's mean and
step-to-step CV (read from a recorded near-aligned run in --runs-dir when one is there, else
1.44e-3 and 0.46), AR(1) with lag-1 correlation rho. Each trial draws a parent and 7 children
(the P1 family: 7 rungs judged against a parent), judges each child against the parent with
harness.judge.stats and harness.judge.outcome, exactly as harness.judge.ladder does, and counts:

  old rule    the ladder's earlier two-outcome rule: an effect when the 95% interval excludes zero, |delta| >=
              rung_min_abs_delta and |delta| > --relative-effect x parent mean
  new, 95%    three outcomes at 95% without Holm (one decision alone)
  new + Holm  three outcomes at the Holm-adjusted level of the family of 7

For a true delta of 0 (every child equals the parent) a false alarm is an up/down call; the
family-wise rate is the chance that any of the 7 calls one. For a true delta of E (the effect of
interest) a "flat" call is the false alarm. Power: the chance of calling "up" for a true delta of
2E and 4E. Children share the parent, as five of the P1 rungs share near-aligned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.judge import outcome, variance  # noqa: E402
from harness.spec import load_knobs  # noqa: E402

RELATIVE_EFFECT = 0.25  # the relative part of E (--relative-effect)

FAMILY = 7
STEPS = 28


def ar1(n: int, rho: float, mean: float, sd: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) with marginal standard deviation sd."""
    x = np.empty(n)
    x[0] = rng.normal(0, sd)
    innovation = sd * np.sqrt(1 - rho**2)
    for i in range(1, n):
        x[i] = rho * x[i - 1] + rng.normal(0, innovation)
    return mean + x


def near_aligned_shape(runs_dir: Path | None) -> tuple[float, float, str]:
    if runs_dir is not None:
        from harness.judge.verdict import after_warmup
        from harness.records.metric_names import ABS_DIFF
        from harness.records.recorded_spec import recorded_spec
        from harness.records.rundir import RunDir
        from harness.records.runload import read_yaml_mapping

        for spec_file in sorted(runs_dir.glob("*/spec.yaml")):
            mapping, _ = read_yaml_mapping(spec_file)
            spec, _ = recorded_spec(mapping, None)
            if spec.rung == "near-aligned" and not spec.overrides:
                values = np.array(after_warmup(RunDir(spec_file.parent).load().series(ABS_DIFF), 2)[1])
                return float(values.mean()), float(values.std(ddof=1) / values.mean()), spec_file.parent.name
    return 1.44e-3, 0.46, "defaults"


def replicates_of(rng, rho, mean, sd, count, seed_sd):
    """`count` seeds of one configuration: each its own AR(1) series around mean + a seed offset."""
    return [ar1(STEPS, rho, mean + rng.normal(0, seed_sd) if seed_sd else mean, sd, rng) for _ in range(count)]


def trial(rng, rho, mean, sd, delta, knobs, seed, count=1, seed_sd=0.0):
    """Outcomes of the 7 children (true mean = parent mean + delta) under the three rules, each side
    `count` seeds whose means scatter by seed_sd (a seed effect) on top of their steps' noise."""
    min_abs, flat_rel = knobs.threshold("rung_min_abs_delta"), RELATIVE_EFFECT
    parent = replicates_of(rng, rho, mean, sd, count, seed_sd)
    parent_mean = float(np.mean([p.mean() for p in parent]))
    diffs = []
    for _ in range(FAMILY):
        child = replicates_of(rng, rho, mean + delta, sd, count, seed_sd)
        diff = variance.replicated_diff_ci(parent, child)
        diffs.append((diff, outcome.effect_of_interest(parent_mean, min_abs, flat_rel), parent_mean))
    old = []
    for diff, _, parent_mean in diffs:
        effect = diff.excludes_zero and abs(diff.diff) >= min_abs and abs(diff.diff) / parent_mean > flat_rel
        old.append(("up" if diff.diff > 0 else "down") if effect else "flat")
    single = [outcome.judge_outcome(diff, effect, 0.95).direction for diff, effect, _ in diffs]
    levels = outcome.holm_levels({str(i): outcome.decision_p_value(d, e) for i, (d, e, _) in enumerate(diffs)}, 0.05)
    holm = [outcome.judge_outcome(d, e, levels[str(i)].confidence, levels[str(i)].reached).direction for i, (d, e, _) in enumerate(diffs)]
    return old, single, holm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--rho", type=float, nargs="*", default=[0.0, 0.3, 0.6])
    parser.add_argument("--replicates", type=int, default=1, help="seeds a side (knobs/stages.yaml replicates)")
    parser.add_argument("--seed-sd", type=float, default=0.0, help="spread of the seeds' true means, as a fraction of the mean")
    parser.add_argument("--relative-effect", type=float, default=0.25, help="the relative part of E (knobs/effects.yaml gives each question its own)")
    parser.add_argument("--deltas", nargs="*", default=["0", "E", "2E", "4E"], help="true deltas to simulate, in units of E")
    args = parser.parse_args()
    knobs = load_knobs("knobs")
    mean, cv, source = near_aligned_shape(args.runs_dir)
    sd = cv * mean
    global RELATIVE_EFFECT
    RELATIVE_EFFECT = args.relative_effect
    effect = outcome.effect_of_interest(mean, knobs.threshold("rung_min_abs_delta"), RELATIVE_EFFECT)
    print(
        f"shape: mean {mean:.3g}, CV {cv:.2f} ({source}); {STEPS} steps; family {FAMILY}; E = {effect:.3g}; {args.trials} trials; "
        f"{args.replicates} seed(s) a side, seed effect sd {args.seed_sd:.0%} of the mean"
    )
    print("| rho | true delta | rule | up/down per decision | flat | inconclusive | family: any up/down |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(11)
    for rho in args.rho:
        for label in args.deltas:
            delta = 0.0 if label == "0" else float(label.rstrip("E") or 1) * effect
            counts = {rule: {"called": 0, "flat": 0, "inconclusive": 0, "family": 0} for rule in ("old rule", "new, 95%", "new + Holm")}
            for t in range(args.trials):
                for rule, directions in zip(counts, trial(rng, rho, mean, sd, delta, knobs, t, args.replicates, args.seed_sd * mean)):
                    called = [d in ("up", "down") for d in directions]
                    counts[rule]["called"] += sum(called)
                    counts[rule]["flat"] += directions.count("flat")
                    counts[rule]["inconclusive"] += directions.count("inconclusive")
                    counts[rule]["family"] += any(called)
            decisions = args.trials * FAMILY
            for rule, c in counts.items():
                print(
                    f"| {rho} | {label} | {rule} | {c['called'] / decisions:.3f} | {c['flat'] / decisions:.3f} | "
                    f"{c['inconclusive'] / decisions:.3f} | {c['family'] / args.trials:.3f} |"
                )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
