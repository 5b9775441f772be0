"""The design step: from the A/A runs at the design seeds (the main job's specs at seeds the main job
never judges, knobs/design.yaml `seeds.design`), measure every judged spec's seed-to-seed spread, then
each question's effect of interest and the sample it needs to be decided far from its boundary
(harness.judge.design), under the judge's own estimator (harness.judge.variance).

    .venv/bin/python tools/design_sample.py --runs-dir reports/runs            # print the table
    .venv/bin/python tools/design_sample.py --runs-dir reports/runs --write    # and rewrite the measured parts

--write rewrites what lies below the marker line of knobs/effects.yaml (each spec's A/A spread:
`measured.specs`) and of knobs/design.yaml (each question's answer and need: `measured.questions`).
The A/A runs are made by the main job itself, shifted onto the design seeds:

    flock "$HEAVY_LOCK" .venv/bin/pytest -m "p1 or acceptance or (p3 and ab)" --mode=colocate --seed-offset=<design - judging>

and the non-colocate pairs mode consistency is sized on by tools/design_sample.py --launch-non-colocate
(under the same lock). Runs are found by their resolved flags (a run made by an older code version of
the trainer is still the same spec). A question whose runs are missing is reported as such, never guessed.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import DEFAULT_KNOBS_DIR, repo_relative  # noqa: E402
from harness.experiment.runs import find_recorded_run  # noqa: E402
from harness.judge import variance  # noqa: E402
from harness.judge.design import needed_pairs, needed_sample, relative_sd, side_variance  # noqa: E402
from harness.judge.effects import ab_question, ladder_question, mode_question, pair_key, question_effect, spec_key  # noqa: E402
from harness.judge.ladder import family_members  # noqa: E402
from harness.judge.verdict import after_warmup  # noqa: E402
from harness.records.metric_names import ABS_DIFF, RAW_REWARD  # noqa: E402
from harness.records.rundir import RunDir  # noqa: E402
from harness.spec import load_knobs, resolve  # noqa: E402
from harness.spec.design_file import DESIGN_FILE, load_design  # noqa: E402
from harness.spec.effects_file import ABS_DIFF_METRIC, EFFECTS_FILE, MARKER, REWARD_METRIC  # noqa: E402
from harness.spec.measured_block import write_below_marker  # noqa: E402

METRICS = {ABS_DIFF_METRIC: ABS_DIFF, REWARD_METRIC: RAW_REWARD}


class MissingRun(LookupError):
    pass


def _run(knobs, runs_dir: Path, stage: str, rung: str, seed: int, mode: str = "colocate", **overrides):
    spec = resolve(knobs, stage, rung, mode, "embedded", {**overrides, "seed": seed})
    path, why = find_recorded_run(runs_dir, spec)
    if path is None:
        raise MissingRun(f"{rung} ({mode}) at seed {seed}{' with ' + str(overrides) if overrides else ''}: {why}")
    run = RunDir(path).load()
    state = run.status.state if run.status else "unknown"
    if state != "finished":
        raise MissingRun(f"{rung} at seed {seed}: run {run.id} is {state}")
    return run


def _series(run, metric: str, warmup: int) -> list[float]:
    return after_warmup(run.series(metric), warmup)[1]


def _side(runs: list, metric: str, warmup: int):
    series = [_series(run, metric, warmup) for run in runs]
    noises = [variance.run_noise(s) for s in series]
    return side_variance([n.mean for n in noises], [n.variance for n in noises], min(len(s) for s in series))


def _spread_entry(side) -> dict:
    return {"mean": side.mean, "relative_sd": relative_sd(side), "df": side.seeds - 1, "run_means": list(side.run_means)}


class DesignRuns:
    """The design seeds' runs, fetched once each."""

    def __init__(self, knobs, runs_dir: Path, warmup: int):
        self.knobs, self.runs_dir, self.warmup = knobs, runs_dir, warmup
        self._runs: dict = {}

    def runs(self, stage: str, rung: str, seeds: list[int], mode: str = "colocate", **overrides) -> list:
        key = (stage, rung, tuple(seeds), mode, tuple(sorted(overrides.items())))
        if key not in self._runs:
            self._runs[key] = [_run(self.knobs, self.runs_dir, stage, rung, seed, mode, **overrides) for seed in seeds]
        return self._runs[key]

    def side(self, stage, rung, seeds, metric=ABS_DIFF_METRIC, mode="colocate", **overrides):
        return _side(self.runs(stage, rung, seeds, mode, **overrides), METRICS[metric], self.warmup)


def _pair_seeds(knobs, design, runs: DesignRuns) -> list[int]:
    """The design seeds at which the A/B's pair was made (both sides): its A/A pairs."""
    pair = knobs.ab.pair
    span = range(design.seeds.design, design.seeds.design + max(design.affordable.ab_pairs, design.seeds.design_count))
    return [
        s
        for s in _available_seeds(runs, pair.stage, pair.baseline, "colocate", span)
        if _available_seeds(runs, pair.stage, pair.candidate, "colocate", [s])
    ]


def measure_specs(knobs, design, runs: DesignRuns) -> tuple[dict, dict]:
    """Every judged spec's A/A spread (abs-diff and reward) and the A/B pairs' differences: (specs, problems)."""
    ladder_seeds = list(range(design.seeds.design, design.seeds.design + design.seeds.design_count))
    pair_seeds = _pair_seeds(knobs, design, runs)
    specs, missing = {}, {}
    rungs = set()
    for stage in ("p1", "p3"):
        for member in family_members(knobs, stage, "embedded"):
            rungs |= {(stage, member), (stage, knobs.rungs[member].parent)}
    for stage, rung in sorted(rungs):
        if spec_key(rung) in specs:
            continue
        # P3's rungs are judged on one seed a side: their A/A spread is measured on whatever design
        # seeds they have (the A/B's pairs give the candidate six).
        seeds = ladder_seeds if stage == "p1" else _available_seeds(runs, stage, rung, "colocate", pair_seeds)
        if len(seeds) < 2:
            missing[spec_key(rung)] = f"{len(seeds)} design run(s) of {rung} at {stage}: an A/A spread needs 2"
            continue
        specs[spec_key(rung)] = {metric: _spread_entry(runs.side(stage, rung, seeds, metric)) for metric in METRICS}
    pair = knobs.ab.pair
    for mode in knobs.stages[pair.stage].modes:
        key = spec_key(pair.baseline, mode)
        if mode == "colocate":
            continue  # the P1 ladder's runs of the baseline (the same runs: one embedded profile for every stage)
        seeds = _available_seeds(runs, pair.stage, pair.baseline, mode, pair_seeds)
        if len(seeds) >= 2:
            specs[key] = {metric: _spread_entry(runs.side(pair.stage, pair.baseline, seeds, metric, mode)) for metric in METRICS}
        else:
            missing[key] = f"{len(seeds)} non-colocate design run(s) of {pair.baseline}: an A/A spread needs 2"
    for name, candidate_runs in _candidates(knobs, runs, pair_seeds).items():
        baseline_runs = runs.runs(pair.stage, pair.baseline, pair_seeds)
        entry = {}
        for metric, vime_metric in METRICS.items():
            difference, base_mean = _pair_differences(baseline_runs, candidate_runs, vime_metric, runs.warmup)
            entry[metric] = {
                "mean": difference.mean,
                # A pair's mean difference sits near zero: its spread is given relative to the baselines' mean.
                "relative_sd": float(np.std(difference.run_means, ddof=1)) / abs(base_mean),
                "df": difference.seeds - 1,
                "run_means": list(difference.run_means),
            }
        specs[pair_key(name)] = entry
    return specs, missing


def _available_seeds(runs: DesignRuns, stage, rung, mode, seeds) -> list[int]:
    found = []
    for seed in seeds:
        try:
            runs.runs(stage, rung, [seed], mode)
            found.append(seed)
        except MissingRun:
            pass
    return found


def _candidates(knobs, runs: DesignRuns, seeds) -> dict:
    pair = knobs.ab.pair
    out = {"pair": runs.runs(pair.stage, pair.candidate, seeds)}
    for name, candidate in knobs.ab.candidates.items():
        if "embedded" in candidate.backends:
            out[name] = runs.runs(pair.stage, pair.baseline, seeds, **candidate.set)
    return out


def _pair_differences(baseline_runs, candidate_runs, metric, warmup):
    """The pairs as one side: each pair's mean step-by-step difference (candidate - baseline) with its
    within-run variance, and the baselines' mean."""
    means, variances, steps, base = [], [], [], []
    for a_run, b_run in zip(baseline_runs, candidate_runs, strict=True):
        a, b = _series(a_run, metric, warmup), _series(b_run, metric, warmup)
        n = min(len(a), len(b))
        noise = variance.run_noise(np.asarray(b[:n]) - np.asarray(a[:n]))
        means.append(noise.mean)
        variances.append(noise.variance)
        steps.append(n)
        base.append(float(np.mean(a)))
    return side_variance(means, variances, min(steps)), float(np.mean(base))


def _answer(delta: float, effect: float) -> str:
    return "flat" if abs(delta) < effect else ("up" if delta > 0 else "down")


def measure_questions(knobs, design, runs: DesignRuns) -> dict:
    """Each question's answer at the design seeds, its margin there and the sample it needs."""
    alpha = 1.0 - knobs.threshold("bootstrap_confidence")
    target, required = design.target_margin_se, float(knobs.threshold("min_margin_se"))
    ladder_seeds = list(range(design.seeds.design, design.seeds.design + design.seeds.design_count))
    pair_seeds = _pair_seeds(knobs, design, runs)
    questions = {}
    for stage in ("p1", "p3"):
        affordable = knobs.stages[stage].replicate_count("embedded")
        members = family_members(knobs, stage, "embedded")
        seeds = ladder_seeds
        for rung_id in members:
            rung = knobs.rungs[rung_id]
            name = ladder_question(rung_id)
            found = [s for s in seeds if _available_seeds(runs, stage, rung_id, "colocate", [s])]
            try:
                child, parent = runs.side(stage, rung_id, found), runs.side(stage, rung.parent, found)
            except (MissingRun, ValueError) as why:
                questions[name] = {"missing": str(why)}
                continue
            effect = question_effect(knobs, name, parent.mean)
            answer = _answer(child.mean - parent.mean, effect.value)
            need = needed_sample(answer, parent, child, effect.value, target, alpha / max(1, len(members)), required_margin=required)
            questions[name] = _entry(answer, need, effect, affordable, child_run_means=list(child.run_means), parent_run_means=list(parent.run_means))
    pair = knobs.ab.pair
    for name, candidate_runs in _candidates(knobs, runs, pair_seeds).items():
        baseline_runs = runs.runs(pair.stage, pair.baseline, pair_seeds)
        for metric, question in ((ABS_DIFF, "drift-reduced"), (RAW_REWARD, "reward-preserved")):
            difference, base_mean = _pair_differences(baseline_runs, candidate_runs, metric, runs.warmup)
            key = ab_question(name, question)
            effect = question_effect(knobs, key, base_mean)
            answer = "not worse" if metric == RAW_REWARD else _answer(difference.mean, effect.value)
            need = needed_pairs(answer, difference, effect.value, target, alpha, required)
            questions[key] = _entry(
                answer, need, effect, design.affordable.ab_pairs, pair_differences_run_means=list(difference.run_means), baseline_mean=base_mean
            )
    questions.update(_mode_questions(knobs, design, runs, alpha, target, required))
    questions.update(_acceptance(knobs, design, runs))
    return questions


def _acceptance(knobs, design, runs: DesignRuns) -> dict:
    """Each acceptance criterion judged by its own check on the design seeds' runs, at as many seeds as
    the main job judges (the stage's replicates): its margin there is the design's measurement."""
    from harness.experiment.evidence import acceptance_context
    from harness.judge.acceptance import CHECKS

    judged = knobs.acceptance.judges
    stage, rung = judged["stage"], judged["rung"]
    count = knobs.stages[stage].replicate_count("embedded")
    seeds = list(range(design.seeds.design, design.seeds.design + count))
    out = {}
    for criterion in knobs.acceptance.criteria:
        name = f"acceptance/{criterion.id}"
        try:
            run = runs.runs(stage, rung, seeds[:1])[0]

            def fetch(other, seed=None, **overrides):
                try:
                    return runs.runs(stage, other, [seeds[0] if seed is None else seed], **overrides)[0]
                except MissingRun as why:
                    raise LookupError(str(why)) from None

            verdict = CHECKS[criterion.check](acceptance_context(run, knobs, fetch, criterion.check))
        except MissingRun as why:
            out[name] = {"missing": str(why)}
            continue
        margin = (verdict.evidence or {}).get("margin")
        value = margin["se_units"] if margin else None
        out[name] = {
            "answer": "pass" if verdict.passed else "fail",
            "passed_at_design_seeds": verdict.passed,
            "margin_se_at_design_seeds": value,
            "seeds": len(seeds),
            # A check without a statistic (a record of what the run logged) is expected where it passed.
            "expected": bool(verdict.passed and (value is None or value >= design.target_margin_se)),
            "message": verdict.message[:300],
        }
    return out


def _mode_questions(knobs, design, runs: DesignRuns, alpha, target, required) -> dict:
    """Mode consistency: each mode's pair (baseline, candidate) at the design seeds it has, its drift
    question sized in pairs at the family of two modes (Holm)."""
    pair = knobs.ab.pair
    out = {}
    pair_seeds = list(range(design.seeds.design, design.seeds.design + max(design.affordable.ab_pairs, design.seeds.design_count)))
    affordable = knobs.ab.mode_pairs.embedded if knobs.ab.mode_pairs else 1
    for mode in knobs.stages[pair.stage].modes:
        key = mode_question(mode)
        seeds = [
            s
            for s in _available_seeds(runs, pair.stage, pair.baseline, mode, pair_seeds)
            if _available_seeds(runs, pair.stage, pair.candidate, mode, [s])
        ]
        if len(seeds) < 2:
            out[key] = {"missing": f"{len(seeds)} {mode} design pair(s): a pair's spread needs 2"}
            continue
        difference, base_mean = _pair_differences(
            runs.runs(pair.stage, pair.baseline, seeds, mode), runs.runs(pair.stage, pair.candidate, seeds, mode), ABS_DIFF, runs.warmup
        )
        effect = question_effect(knobs, key, base_mean)
        answer = _answer(difference.mean, effect.value)
        need = needed_pairs(answer, difference, effect.value, target, alpha / 2, required)
        out[key] = _entry(answer, need, effect, affordable, pair_differences_run_means=list(difference.run_means), baseline_mean=base_mean)
    return out


def _entry(answer, need, effect, affordable: int, **sides) -> dict:
    expected = need.seeds is not None and need.seeds <= affordable
    entry = {
        "answer": answer,
        "delta": need.delta,
        "effect_boundary": effect.value,
        "effect_rule": effect.rule,
        "distance_to_boundary": need.boundary_distance,
        "margin_se_at_design_seeds": need.margin_at_measured,
        "seeds_needed": need.seeds if need.seeds is not None else "more than 64",
        "affordable": affordable,
        "expected": expected,
    }
    return entry | sides


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", default=str(REPO / "reports" / "runs"), help="where the design seeds' runs are")
    parser.add_argument("--knobs", type=Path, default=DEFAULT_KNOBS_DIR)
    parser.add_argument("--machine", default="", help="the machine the runs were made on, for the record")
    parser.add_argument("--kind", default="avx512", help="the record's label for the CPU kind (docs/results.md's design table)")
    parser.add_argument("--write", action="store_true", help="rewrite the measured parts of knobs/effects.yaml and knobs/design.yaml")
    args = parser.parse_args(argv)
    runs_dir = Path(args.runs_dir).resolve()
    if not runs_dir.is_dir():
        print(f"--runs-dir {runs_dir}: no such directory", file=sys.stderr)
        return 2
    knobs = load_knobs(args.knobs)
    design = load_design(args.knobs)
    runs = DesignRuns(knobs, runs_dir, int(knobs.threshold("warmup_steps")))
    specs, missing = measure_specs(knobs, design, runs)
    seeds = sorted(
        {seed for seed in range(design.seeds.design, design.seeds.design + 16) if _available_seeds(runs, "p1", "near-aligned", "colocate", [seed])}
    )
    measured_specs = _as_plain({"seeds": seeds, "date": date.today().isoformat(), "machine": args.machine, "specs": specs})
    for spec, entry in measured_specs["specs"].items():
        print(f"{spec:40s} " + "  ".join(f"{m} mean {e['mean']:.4g} sd {e['relative_sd']:.2%} (df {e['df']})" for m, e in entry.items()))
    for spec, why in missing.items():
        print(f"{spec:40s} missing: {why}")
    # The questions' bands read the spreads just measured: the knobs as they will be written.
    from dataclasses import replace

    from harness.spec.effects_file import Measured

    knobs = replace(knobs, effects=knobs.effects.model_copy(update={"measured": Measured.model_validate(measured_specs)}))
    questions = _as_plain(measure_questions(knobs, design, runs))
    for name, entry in questions.items():
        if "missing" in entry:
            print(f"{name:40s} missing: {entry['missing']}")
            continue
        if name.startswith("acceptance/"):
            margin = entry["margin_se_at_design_seeds"]
            shown = f"margin {margin:+.1f} SE" if isinstance(margin, (int, float)) else "no statistic"
            print(
                f"{name:40s} {'pass' if entry['passed_at_design_seeds'] else 'FAIL'}  {shown}  {'expected' if entry['expected'] else 'NOT sized'}  {entry['message'][:120]}"
            )
            continue
        print(
            f"{name:40s} {entry['answer']:9s} delta {entry['delta']:+.3g} boundary {entry['effect_boundary']:.3g} "
            f"margin {entry['margin_se_at_design_seeds']:+.1f} SE  needs {entry['seeds_needed']} (affordable {entry['affordable']})  "
            f"{'expected' if entry['expected'] else 'NOT sized'}"
        )
    if args.write:
        write_below_marker(args.knobs / EFFECTS_FILE, MARKER, {"measured": measured_specs})
        measured_on = {
            args.kind: {
                "seeds": measured_specs["seeds"],
                "date": measured_specs["date"],
                "runs_dir": repo_relative(runs_dir),
                "machine": args.machine,
            }
        }
        write_below_marker(args.knobs / DESIGN_FILE, MARKER, {"measured": {"measured_on": measured_on, "questions": questions}})
        print(f"wrote {args.knobs / EFFECTS_FILE} and {args.knobs / DESIGN_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
