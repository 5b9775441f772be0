"""The design step: from the design seeds' runs (the main job's specs at seeds the main job does not
judge, knobs/design.yaml `seeds.design`), measure each question's effect and variance, and write
what each needs to be decided far from its boundary (harness.judge.design) into knobs/design.yaml.

    .venv/bin/python tools/design_sample.py --runs-dir reports/runs            # print the table
    .venv/bin/python tools/design_sample.py --runs-dir reports/runs --write    # and rewrite knobs/design.yaml
    .venv/bin/python tools/design_sample.py --runs-dir avx512=DIR --runs-dir avx2=DIR   # one design for both kinds

The design seeds' runs are made by the main job itself, shifted onto the design seeds:

    .venv/bin/pytest -m "p1 or acceptance or (p3 and ab)" --mode=colocate --seed-offset=<design - judging>

Runs are found by their resolved flags (a run made by an older code version of the trainer is still
the same spec). A question whose runs are missing is reported as such, never guessed.
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import date
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import DEFAULT_KNOBS_DIR  # noqa: E402
from harness.experiment.runs import find_recorded_run  # noqa: E402
from harness.judge import stats  # noqa: E402
from harness.judge.design import needed_pairs, needed_sample, relative_seed_spread, side_variance, with_seed_floor  # noqa: E402
from harness.judge.ladder import family_members  # noqa: E402
from harness.judge.outcome import effect_of_interest  # noqa: E402
from harness.judge.verdict import after_warmup  # noqa: E402
from harness.records.metric_names import ABS_DIFF, RAW_REWARD  # noqa: E402
from harness.records.rundir import RunDir  # noqa: E402
from harness.spec import load_knobs, resolve  # noqa: E402
from harness.spec.design_file import DESIGN_FILE, load_design  # noqa: E402


class MissingRun(LookupError):
    pass


def _run(knobs, runs_dir: Path, stage: str, rung: str, seed: int, mode: str = "colocate", **overrides):
    spec = resolve(knobs, stage, rung, mode, "embedded", {**overrides, "seed": seed})
    path, why = find_recorded_run(runs_dir, spec)
    if path is None:
        raise MissingRun(f"{rung} at seed {seed}{' with ' + str(overrides) if overrides else ''}: {why}")
    run = RunDir(path).load()
    state = run.status.state if run.status else "unknown"
    if state != "finished":
        raise MissingRun(f"{rung} at seed {seed}: run {run.id} is {state}")
    return run


def _series(run, metric: str, warmup: int) -> list[float]:
    return after_warmup(run.series(metric), warmup)[1]


def _mean_variance(values: list[float]) -> float:
    return stats.block_bootstrap_mean_se(values) ** 2


def _side(knobs, runs_dir, stage, rung, seeds, metric, warmup, **overrides):
    series = [_series(_run(knobs, runs_dir, stage, rung, seed, **overrides), metric, warmup) for seed in seeds]
    return side_variance([float(np.mean(s)) for s in series], [_mean_variance(s) for s in series], min(len(s) for s in series))


def measure(knobs, design, runs_dir: Path, judged_spread: dict | None = None) -> dict:
    """One machine kind's design runs. `judged_spread` (the first kind's seed_spread) gives the
    effect of interest and the reward margin the judge will apply; without it they are this kind's."""
    warmup = int(knobs.threshold("warmup_steps"))
    base, count = design.seeds.design, design.seeds.design_count
    seeds = list(range(base, base + count))
    alpha = 1.0 - knobs.threshold("bootstrap_confidence")
    target = design.target_margin_se
    required = float(knobs.threshold("min_margin_se"))
    questions, sides = {}, {}

    def side(rung, metric=ABS_DIFF, stage="p1", **overrides):
        key = (rung, metric, stage, tuple(sorted(overrides.items())))
        if key not in sides:
            sides[key] = _side(knobs, runs_dir, stage, rung, seeds, metric, warmup, **overrides)
        return sides[key]

    # The effect of interest from the seeds: how far a change of seed alone moves a run's mean.
    ladder = family_members(knobs, "p1", "embedded")
    measured_sides = []
    for rung_id in ladder + [knobs.rungs[r].parent for r in ladder]:
        try:
            measured_sides.append(side(rung_id))
        except MissingRun:
            pass
    spread = relative_seed_spread(list({id(s): s for s in measured_sides}.values()))
    reward_cv = _reward_spread(knobs, side)  # the reward non-inferiority margin's seed spread, once
    e_rel = design.effect_of_interest.z * spread
    allowed_rel = design.reward_margin.z * reward_cv
    if judged_spread is not None:
        e_rel, allowed_rel = judged_spread["effect_of_interest_relative"], judged_spread["reward_allowed_drop_relative"]
    family_alpha = alpha / max(1, len(ladder))
    for rung_id in ladder:
        rung = knobs.rungs[rung_id]
        try:
            child, parent = side(rung_id), side(rung.parent)
        except MissingRun as missing:
            questions[f"ladder/{rung_id}"] = {"missing": str(missing)}
            continue
        # Three seeds estimate a side's seed variance with 2 degrees of freedom: floored at the spread
        # pooled over every measured side (harness.judge.design.with_seed_floor).
        child, parent = with_seed_floor(child, spread), with_seed_floor(parent, spread)
        questions[f"ladder/{rung_id}"] = _rung_entry(knobs, design, rung, child, parent, e_rel, family_alpha)

    # The A/B pair and its further candidates: one pair a seed, paired step by step; every design
    # seed is one pair, so the pairs' spread is measured, not assumed away.
    pair = knobs.ab.pair
    candidates = {"pair": {"embedded-logprob-operator": None}} | {name: c.set for name, c in knobs.ab.candidates.items() if "embedded" in c.backends}
    for name, flags in candidates.items():
        try:
            baseline_runs = [_run(knobs, runs_dir, pair.stage, pair.baseline, s) for s in seeds]
            if name == "pair":
                candidate_runs = [_run(knobs, runs_dir, pair.stage, pair.candidate, s) for s in seeds]
            else:
                candidate_runs = [_run(knobs, runs_dir, pair.stage, pair.baseline, s, **flags) for s in seeds]
        except MissingRun as missing:
            questions[f"ab/{name}/drift-reduced"] = questions[f"ab/{name}/reward-preserved"] = {"missing": str(missing)}
            continue
        for metric, question in ((ABS_DIFF, "drift-reduced"), (RAW_REWARD, "reward-preserved")):
            difference, base_mean = _pair_differences(baseline_runs, candidate_runs, metric, warmup)
            if metric == RAW_REWARD:
                allowed = allowed_rel * abs(base_mean)
                need = needed_pairs("not worse", difference, allowed, target, alpha, required)
                questions[f"ab/{name}/{question}"] = _entry(
                    "not worse", need, allowed, design, design.affordable.ab_pairs, pair_differences=difference, baseline_mean=base_mean
                )
            else:
                effect, answer = _effect_and_answer(knobs, e_rel, base_mean, difference.mean)
                need = needed_pairs(answer, difference, effect, target, alpha, required)
                questions[f"ab/{name}/{question}"] = _entry(
                    answer, need, effect, design, design.affordable.ab_pairs, pair_differences=difference, baseline_mean=base_mean
                )
    questions.update(_acceptance(knobs, design, runs_dir, seeds[0]))
    questions.update(_p3_ladder(knobs, design, runs_dir, seeds[0], e_rel, alpha))
    return {
        "measured_on": {
            "seeds": seeds,
            "date": date.today().isoformat(),
            "runs_dir": str(runs_dir),
            "steps_after_warmup": max((s.steps for s in sides.values()), default=0),
        },
        "seed_spread": {
            "abs_diff_relative": spread,
            "abs_diff_sides": len({id(x) for x in measured_sides}),
            "effect_of_interest_relative": design.effect_of_interest.z * spread,
            "reward_relative": reward_cv,
            "reward_allowed_drop_relative": design.reward_margin.z * reward_cv,
        },
        "questions": questions,
    }


def _effect_and_answer(knobs, e_rel: float, parent_mean: float, delta: float) -> tuple[float, str]:
    """E as the judge computes it (harness.judge.outcome.effect_of_interest, at the measured relative
    part), and the answer the measured delta gives against it."""
    effect = effect_of_interest(parent_mean, knobs.threshold("rung_min_abs_delta"), e_rel)
    return effect, "flat" if abs(delta) < effect else ("up" if delta > 0 else "down")


def _rung_entry(knobs, design, rung, child, parent, e_rel: float, family_alpha: float) -> dict:
    effect, answer = _effect_and_answer(knobs, e_rel, parent.mean, child.mean - parent.mean)
    need = needed_sample(
        answer, parent, child, effect, design.target_margin_se, family_alpha, required_margin=float(knobs.threshold("min_margin_se"))
    )
    return _entry(answer, need, effect, design, child=child, parent=parent)


def _acceptance(knobs, design, runs_dir: Path, seed: int) -> dict:
    """Each acceptance criterion with a statistic, judged by its own check on the design seed's runs:
    its margin there is the design's measurement (one run a side, as the main job judges it)."""
    from harness.experiment.evidence import acceptance_context
    from harness.judge.acceptance import CHECKS

    judged = knobs.acceptance.judges
    out = {}
    for criterion in knobs.acceptance.criteria:
        name = f"acceptance/{criterion.id}"
        try:
            run = _run(knobs, runs_dir, judged["stage"], judged["rung"], seed)
            fetch = lambda rung, **o: _run(knobs, runs_dir, judged["stage"], rung, o.pop("seed", seed), **o)  # noqa: E731
            context = acceptance_context(run, knobs, fetch, criterion.check)
            verdict = CHECKS[criterion.check](context)
        except MissingRun as missing:
            out[name] = {"missing": str(missing)}
            continue
        margin = (verdict.evidence or {}).get("margin")
        if margin is None:  # no statistic: a check of what the run recorded
            out[name] = {"answer": "pass", "statistic": False, "passed_at_design_seed": verdict.passed, "expected": verdict.passed}
            continue
        value = margin["se_units"]
        out[name] = {
            "answer": "pass",
            "statistic": True,
            "passed_at_design_seed": verdict.passed,
            "margin_se_at_design_seeds": value,
            "seeds_needed": 1 if value >= design.target_margin_se else "more than the check's one run a side",
            "expected": bool(verdict.passed and value >= design.target_margin_se),
        }
    return out


def _p3_ladder(knobs, design, runs_dir: Path, seed: int, e_rel: float, alpha: float) -> dict:
    """The P3 rungs (judged in make test, one seed a side as P3 runs them): the design seed's pair."""
    out = {}
    warmup = int(knobs.threshold("warmup_steps"))
    members = family_members(knobs, "p3", "embedded")
    for rung_id in members:
        rung = knobs.rungs[rung_id]
        try:
            child = _side(knobs, runs_dir, "p3", rung_id, [seed], ABS_DIFF, warmup)
            parent = _side(knobs, runs_dir, "p3", rung.parent, [seed], ABS_DIFF, warmup)
        except MissingRun as missing:
            out[f"ladder/{rung_id}"] = {"missing": str(missing)}
            continue
        entry = _rung_entry(knobs, design, rung, child, parent, e_rel, alpha / max(1, len(members)))
        # P3 judges one seed a side: an answer needing more is not expected there.
        entry["expected"] = entry["seeds_needed"] == 1
        out[f"ladder/{rung_id}"] = entry
    return out


def _reward_spread(knobs, side) -> float:
    """The seed-to-seed relative spread of a run's mean reward, pooled over the ladder's P1 rungs."""
    sides = []
    for rung_id in family_members(knobs, "p1", "embedded"):
        try:
            sides.append(side(rung_id, RAW_REWARD))
        except MissingRun:
            pass
    return relative_seed_spread(sides)


def _pair_differences(baseline_runs, candidate_runs, metric, warmup):
    """The pairs as one side: each pair's mean step-by-step difference (candidate - baseline) with its
    block-bootstrap variance, and the baselines' mean."""
    means, variances, steps, base = [], [], [], []
    for a_run, b_run in zip(baseline_runs, candidate_runs, strict=True):
        a, b = _series(a_run, metric, warmup), _series(b_run, metric, warmup)
        n = min(len(a), len(b))
        paired = stats.block_bootstrap_paired_diff_ci(a[:n], b[:n])
        means.append(float(paired.diff))
        variances.append(float(paired.se) ** 2)
        steps.append(n)
        base.append(float(np.mean(a)))
    return side_variance(means, variances, min(steps)), float(np.mean(base))


def _entry(answer, need, effect, design, affordable_seeds: int | None = None, **sides) -> dict:
    affordable = need.seeds is not None and need.seeds <= (affordable_seeds or design.affordable.seeds_per_side)
    entry = {
        "answer": answer,
        "delta": need.delta,
        "effect_boundary": effect,
        "distance_to_boundary": need.boundary_distance,
        "margin_se_at_design_seeds": need.margin_at_measured,
        "seeds_needed": need.seeds if need.seeds is not None else f"more than {64}",
        "expected": affordable,
    }
    for name, side in sides.items():
        if hasattr(side, "run_means"):
            entry[f"{name}_run_means"] = list(side.run_means)
        elif hasattr(side, "se"):
            entry[f"{name}_se_one_pair"] = side.se
        else:
            entry[name] = side
    return entry


def _as_plain(value):
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_plain(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.4g}")
    if isinstance(value, np.integer):
        return int(value)
    return value


def _needed_rank(entry: dict) -> float:
    needed = entry.get("seeds_needed")
    if isinstance(needed, int):
        return float(needed)
    return math.inf if "delta" in entry else (0.0 if entry.get("expected") else math.inf)


def combine(by_kind: dict[str, dict]) -> dict:
    """One design for every machine kind measured: per question the kind that needs the most (its
    entry, with every kind's answer, margin and need beside it under `by_machine`). A question whose
    answer differs between kinds, or that one kind could not measure, is not an expected answer."""
    kinds = list(by_kind)
    first = by_kind[kinds[0]]
    questions = {}
    for name in first["questions"]:
        entries = {kind: by_kind[kind]["questions"].get(name, {"missing": "no such question"}) for kind in kinds}
        measured = {kind: e for kind, e in entries.items() if "missing" not in e}
        if len(kinds) == 1:
            questions[name] = entries[kinds[0]]
            continue
        if not measured:
            questions[name] = entries[kinds[0]]
            continue
        worst_kind = max(measured, key=lambda kind: _needed_rank(measured[kind]))
        entry = dict(measured[worst_kind])
        entry["by_machine"] = {
            kind: (
                {"missing": e["missing"]}
                if "missing" in e
                else {
                    "answer": e.get("answer"),
                    "margin_se_at_design_seeds": e.get("margin_se_at_design_seeds"),
                    "seeds_needed": e.get("seeds_needed"),
                    "expected": e.get("expected"),
                }
            )
            for kind, e in entries.items()
        }
        answers = {e.get("answer") for e in measured.values()}
        if len(measured) < len(kinds) or len(answers) > 1:
            entry["expected"] = False
            entry["not_expected_because"] = "answers differ between machine kinds" if len(answers) > 1 else "a machine kind has no runs for it"
        else:
            entry["expected"] = all(bool(e.get("expected")) for e in measured.values())
        questions[name] = entry
    combined = {
        "measured_on": {kind: by_kind[kind]["measured_on"] for kind in kinds} if len(kinds) > 1 else first["measured_on"],
        "seed_spread": first["seed_spread"],
        "questions": questions,
    }
    if len(kinds) > 1:
        combined["seed_spread_by_machine"] = {kind: by_kind[kind]["seed_spread"] for kind in kinds}
    return combined


def _runs_dirs(values: list[str] | None) -> dict[str, Path]:
    """`--runs-dir [KIND=]PATH`, repeatable: the first kind's seed spread sets E and the reward margin."""
    dirs = {}
    for value in values or [str(REPO / "reports" / "runs")]:
        kind, _, path = value.rpartition("=")
        dirs[kind or "this machine"] = Path(path).resolve()
    return dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs-dir",
        action="append",
        metavar="[KIND=]PATH",
        help="the design seeds' runs of one machine kind (repeat per kind, e.g. avx512=... avx2=...; the first sets E)",
    )
    parser.add_argument("--knobs", type=Path, default=DEFAULT_KNOBS_DIR)
    parser.add_argument("--write", action="store_true", help="rewrite the measured part of knobs/design.yaml")
    args = parser.parse_args(argv)
    knobs = load_knobs(args.knobs)
    design = load_design(args.knobs)
    by_kind, judged_spread = {}, None
    for kind, runs_dir in _runs_dirs(args.runs_dir).items():
        if not runs_dir.is_dir():
            print(f"--runs-dir {kind}={runs_dir}: no such directory", file=sys.stderr)
            return 2
        by_kind[kind] = _as_plain(measure(knobs, design, runs_dir, judged_spread))
        by_kind[kind]["measured_on"]["runs_dir"] = str(runs_dir)
        judged_spread = judged_spread or by_kind[kind]["seed_spread"]
    measured = combine(by_kind)
    for name, entry in measured["questions"].items():
        if "missing" in entry:
            print(f"{name:40s} missing: {entry['missing']}")
            continue
        if "delta" not in entry:
            margin = entry.get("margin_se_at_design_seeds")
            shown = f"margin {margin:+.1f} SE" if isinstance(margin, (int, float)) else "no statistic"
            print(f"{name:40s} pass      {shown}  {'expected' if entry['expected'] else 'NOT expected'}")
            continue
        print(
            f"{name:40s} {entry['answer']:9s} delta {entry['delta']:+.3g} boundary {entry['effect_boundary']:.3g} "
            f"margin {entry['margin_se_at_design_seeds']:+.1f} SE  seeds needed {entry['seeds_needed']}  "
            f"{'expected' if entry['expected'] else 'NOT expected'}"
            + "".join(f"  [{kind}: {m.get('seeds_needed', m.get('missing'))}]" for kind, m in (entry.get("by_machine") or {}).items())
        )
    print(yaml.safe_dump({"seed_spread": measured["seed_spread"]}, sort_keys=False))
    if args.write:
        path = args.knobs / DESIGN_FILE
        text = path.read_text()
        marker = "# --- measured by tools/design_sample.py: do not edit by hand below this line ---\n"
        head = text.split(marker)[0]
        body = yaml.safe_dump({"measured": measured}, sort_keys=False, width=110)
        path.write_text(head + marker + body)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
