"""The drift budget's evidence: a run's own sampled tokens re-scored under each lever setting.

The numbers (shares, intervals, the localisation) are harness.judge.budget's; this module gathers
its evidence. Per run: the rollouts whose weights the run kept (its capture bundles), their
sequences (cross-checked against the rollout dumps), and one scorer process for all of a rung's runs
(harness.embedded.lever_score, forked from the session's pre-imported interpreter: they share one
configuration but the seed) that builds it once and scores every setting at every run's weights;
the result is cached in the first run's budget/ directory, keyed by the tokens and the settings. Settings come from the lever table
(knobs/levers.yaml): native, all operator levers, each lever alone, each operator lever left out.

The scorer's rollout side is a prefill; the run's was decode. Where the setting leaves the decode
lever (attention-decode) off, the rollout side keeps what the run recorded in decode: the prefill
plus the run's own decode-minus-prefill difference at its native configuration. The replay check
says how far the native re-score is from the record on each side (0 of N tokens unequal on the runs
measured).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness.judge.budget import ALL, NATIVE, SeedScores, add_key, loo_key
from harness.judge.paired import trainer_flags
from harness.records.atomic import atomic_write_json
from harness.records.runload import Run
from harness.spec.backends import backend
from harness.spec.levers import LeverFile

CACHE_DIR = "budget"
SCORER_MODULE = "harness.embedded.lever_score"
SCORER_TIMEOUT_S = 900  # one engine start and a few dozen prefills of ~2,000 tokens
DECODE_SWITCH = "engine-split-kv-off"  # the attention-decode lever's switch (knobs/levers.yaml)
# Flags of a run that already aligns boundaries: its budget would start from another native.
OWN_LEVER_FLAGS = ("embedded-true-on-policy", "embedded-levers", "embedded-logprob-operator", "embedded-replay-processed-logprobs")


class NotMeasured(Exception):
    """A run whose budget cannot be measured here, and why (never a pass)."""


def settings(levers: LeverFile, *, leave_one_out: bool = True) -> list[dict]:
    """Every setting the budget needs: native, all operator levers, each lever alone, each operator lever
    left out (unless `leave_one_out` is off: the localisation reads the add-one shares only)."""
    everything = sorted(levers.all_operator_switches())
    out = [{"key": NATIVE, "switches": [], "replay": False}, {"key": ALL, "switches": everything, "replay": False}]
    for name, lever in levers.levers.items():
        out.append({"key": add_key(name), "switches": sorted(lever.switches), "replay": lever.replay})
        if lever.kind == "operator" and leave_one_out:
            out.append({"key": loo_key(name), "switches": sorted(set(everything) - set(lever.switches)), "replay": False})
    return out


def _not_measured_reason(run: Run) -> str | None:
    if not backend(run.spec.backend).trainer_in_repo:
        return f"run {run.id} ran on backend {run.spec.backend!r}; only the embedded backend's configuration can be rebuilt and re-scored here"
    if trainer_flags(run) is None:
        return f"run {run.id} records no embedded trainer command (argv.json)"
    if int(run.spec.flag("tensor-model-parallel-size", 1)) != 1:
        return f"run {run.id} uses TP > 1; the re-scorer builds one TP rank"
    own = [flag for flag in OWN_LEVER_FLAGS if run.spec.flag(flag) not in (None, False, "native")]
    if own:
        return f"run {run.id} already changes how a boundary is computed (--{own[0]}); its budget would start from another native"
    if not weight_rollouts(run):
        return f"run {run.id} kept no weights to re-score at (no dumps/weights_N.pt or capture bundles)"
    return None


def weight_rollouts(run: Run) -> list[tuple[int, Path]]:
    """(rollout id, file holding the weights it was generated with), in rollout order: the run's
    weights dumps (dumps/weights_N.pt), else its capture bundles (which hold them too)."""
    found = {}
    for pattern in ("capture_*.pt", "weights_*.pt"):  # a weights dump wins over a capture of the same rollout
        for path in (run.path / "dumps").glob(pattern):
            stem = path.stem.split("_", 1)[1]
            if stem.isdigit():
                found[int(stem)] = path
    return sorted(found.items())


def _group(run: Run, rollout_id: int, weights: str) -> dict:
    """One rollout's samples as a job group: tokens and the rollout's log-probs from its rollout dump,
    the trainer's recompute from its train dump."""
    import torch

    rollout = torch.load(run.path / "dumps" / f"rollout_{rollout_id}.pt", map_location="cpu", weights_only=False)
    train = torch.load(run.path / "dumps" / f"train_{rollout_id}_0.pt", map_location="cpu", weights_only=False)
    trainer = {int(s["index"]): s["log_probs"] for s in train["samples"]}
    sequences = []
    for s in rollout["samples"]:
        tokens, response = [int(t) for t in s["tokens"]], int(s["response_length"])
        sequences.append(
            {
                "tokens": tokens,
                "prompt_len": len(tokens) - response,
                "response_len": response,
                "recorded": [float(v) for v in s["rollout_log_probs"]],
                "recorded_trainer": [float(v) for v in trainer[int(s["index"])]],
            }
        )
    return {"rollout": rollout_id, "weights": weights, "sequences": sequences}


def initial_rollout(run: Run) -> dict:
    """Rollout 0 (sampled at weight version 0) as a job group, scored at the run's initial weights
    (the re-score-against-a-real-run check uses it)."""
    import torch

    rollout = torch.load(run.path / "dumps" / "rollout_0.pt", map_location="cpu", weights_only=False)
    late = [s["index"] for s in rollout["samples"] if int(s["weight_versions"][0]) != 0]
    if late:
        raise NotMeasured(f"{run.id}: rollout 0's sample {late[0]} was not sampled at weight version 0")
    return _group(run, 0, "initial")


def job(run: Run) -> dict:
    """The scorer's job: per rollout whose weights the run kept, those weights and every sample's
    tokens and recorded log-probs (both sides)."""
    groups = []
    for rollout_id, path in weight_rollouts(run):
        if not (run.path / "dumps" / f"rollout_{rollout_id}.pt").is_file() or not (run.path / "dumps" / f"train_{rollout_id}_0.pt").is_file():
            raise NotMeasured(f"{run.id}: rollout {rollout_id}'s weights are kept but its rollout or train dump is missing")
        groups.append(_group(run, rollout_id, str(path)))
    return {"rollouts": groups}


def _key(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


# Flags that differ between a rung's seeds without changing what a forward computes: the seed (the
# engine's sampling and the prompts' order; the weights come from the captures) and where it wrote.
PER_RUN_FLAGS = ("seed", "save-debug-rollout-data", "save-debug-train-data", "embedded-output-dir")


def shared_flags(runs: list[Run]) -> list[str]:
    """The trainer flags the runs share (the first run's, less what PER_RUN_FLAGS let differ); a run
    whose configuration differs otherwise is an error naming it: one scorer builds one configuration."""
    from harness.spec.render import parse_argv

    def configuration(run: Run) -> dict:
        return {k: v for k, v in parse_argv(trainer_flags(run)).items() if k not in PER_RUN_FLAGS}

    first = configuration(runs[0])
    for run in runs[1:]:
        other = configuration(run)
        differ = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        if differ:
            raise NotMeasured(f"runs {runs[0].id} and {run.id} differ in --{differ[0]}: one re-score builds one configuration")
    return trainer_flags(runs[0])


def scores(
    runs: list[Run],
    levers: LeverFile,
    *,
    initial: bool = False,
    setting_list: list[dict] | None = None,
    without: tuple[str, ...] = (),
    leave_one_out: bool = True,
) -> dict:
    """The scorer's output for the runs (one configuration, several seeds) under every setting (or
    `setting_list`), from the first run's budget/ cache or from one scorer process. `initial`: score
    rollout 0 at the initial weights instead of the capture rollouts. `without`: flags (names without
    dashes) left out of the runs' configuration, as the planted fault's clean twin leaves its fault.
    `leave_one_out` off: no leave-one-out settings (settings())."""
    import torch
    from filelock import FileLock

    groups = [dict(initial_rollout(run) if initial else group, run=run.id) for run in runs for group in ([None] if initial else job(run)["rollouts"])]
    todo = {"rollouts": groups, "settings": setting_list or settings(levers, leave_one_out=leave_one_out)}
    todo |= {"without": sorted(without)} if without else {}
    directory = runs[0].path / CACHE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    cache = directory / f"scores-{_key(todo)}.pt"
    with FileLock(str(cache) + ".lock"):
        if cache.is_file():
            return torch.load(cache, map_location="cpu", weights_only=False)
        job_file = cache.with_suffix(".job.json")
        atomic_write_json(job_file, todo)
        out = cache.with_name(cache.name + ".scoring")
        cmd = [sys.executable, "-m", SCORER_MODULE, "--job", str(job_file), "--out", str(out), "--", *_drop(shared_flags(runs), without)]
        code, output = _run_scorer(cmd)
        job_file.unlink(missing_ok=True)
        if code != 0 or not out.is_file():
            lines = [ln for ln in (output or "").splitlines() if ln.strip()]
            raise RuntimeError(f"re-scoring {', '.join(run.id for run in runs)} exited {code}: {lines[-1][-300:] if lines else 'no output'}")
        result = torch.load(out, map_location="cpu", weights_only=False)
        result["job"] = {
            "runs": [g["run"] for g in groups for _ in g["sequences"]],
            "rollouts": [g["rollout"] for g in groups for _ in g["sequences"]],
            "recorded_trainer": [x["recorded_trainer"] for g in groups for x in g["sequences"]],
        }
        torch.save(result, cache)
        out.unlink(missing_ok=True)
        return result


def _drop(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """The argv less each named flag and its values."""
    from harness.spec.render import argv_items

    return [part for _, token, values in argv_items(argv) if token.removeprefix("--") not in flags for part in (token, *values)]


def _run_scorer(cmd: list[str]) -> tuple[int, str]:
    """Forked from the session's pre-imported interpreter (harness.launch.warm), or started cold."""
    from harness.launch.warm import WarmStartUnavailable, run_to_end

    repo = Path(__file__).resolve().parents[2]
    try:
        return run_to_end(cmd, repo, dict(os.environ), SCORER_TIMEOUT_S)
    except WarmStartUnavailable:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=SCORER_TIMEOUT_S, cwd=repo)
        return done.returncode, done.stderr


def _replay_check(name: str, scored: list, recorded: list) -> dict:
    unequal = sum(int(np.sum(np.asarray(a, dtype=np.float32) != np.asarray(b, dtype=np.float32))) for a, b in zip(scored, recorded))
    largest = max((float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)))) for a, b in zip(scored, recorded)), default=0.0)
    return {f"{name}_unequal_tokens": unequal, f"{name}_max_abs": largest}


def _token_gaps(result: dict, levers: LeverFile, decode_gap: list | None = None) -> tuple[dict[str, list[np.ndarray]], list[np.ndarray]]:
    """Per setting, each sequence's per-token |trainer - rollout|, and the decode-minus-prefill
    difference the rollout side kept (the run's own at its native configuration, unless given)."""
    recorded = [np.asarray(r, dtype=np.float64) for r in result["recorded"]]
    if decode_gap is None:
        decode_gap = [rec - np.asarray(pre, dtype=np.float64) for rec, pre in zip(recorded, result["settings"][NATIVE]["rollout"])]
    switches = {s["key"]: set(s["switches"]) for s in settings(levers)}
    per_token = {}
    for key, sides in result["settings"].items():
        rollout = [np.asarray(r, dtype=np.float64) for r in sides["rollout"]]
        if DECODE_SWITCH not in switches.get(key, set()):
            rollout = [r + g for r, g in zip(rollout, decode_gap)]
        per_token[key] = [np.abs(np.asarray(t, dtype=np.float64) - r) for t, r in zip(sides["trainer"], rollout)]
    return per_token, decode_gap


def _kept(*per_token: dict[str, list[np.ndarray]], count: int) -> tuple[list[np.ndarray], np.ndarray]:
    """A sampled token at the top-k/top-p edge can fall outside the kept set under another setting's
    arithmetic: its processed log-prob is -inf there. The comparison stays paired: such a token is
    left out of every setting (of every scoring given), and counted. Returns each sequence's kept
    tokens and which sequences keep any."""
    kept = [np.logical_and.reduce([np.isfinite(gaps[i]) for table in per_token for gaps in table.values()]) for i in range(count)]
    return kept, np.array([bool(k.any()) for k in kept])


def seed_scores(runs: list[Run], levers: LeverFile) -> list[SeedScores]:
    """Each run's per-sequence gaps under every setting (the judge's evidence: one SeedScores a run),
    from one re-score of them all; NotMeasured with the reason when they cannot be re-scored."""
    for run in runs:
        reason = _not_measured_reason(run)
        if reason is not None:
            raise NotMeasured(reason)
    try:
        result = scores(runs, levers)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        raise NotMeasured(f"re-scoring failed: {str(exc).splitlines()[0]}") from None
    recorded = [np.asarray(r, dtype=np.float64) for r in result["recorded"]]
    native = result["settings"][NATIVE]
    per_token, _ = _token_gaps(result, levers)
    kept, usable = _kept(per_token, count=len(recorded))
    gaps = {key: np.array([g[k].mean() for g, k, u in zip(values, kept, usable) if u]) for key, values in per_token.items()}
    owner = np.asarray(result["job"]["runs"])[usable]
    left_out = {run_id: int(sum((~k).sum() for k, o in zip(kept, result["job"]["runs"]) if o == run_id)) for run_id in set(result["job"]["runs"])}
    out = []
    for run in runs:
        mine = owner == run.id
        rows = [i for i, o in enumerate(result["job"]["runs"]) if o == run.id]
        replay = {
            **_replay_check("rollout", [native["rollout"][i] for i in rows], [result["recorded"][i] for i in rows]),
            **_replay_check("trainer", [native["trainer"][i] for i in rows], [result["job"]["recorded_trainer"][i] for i in rows]),
            "scorer_seconds": result.get("seconds"),
            "tokens_left_out": left_out.get(run.id, 0),  # outside the kept set under some setting (see above)
        }
        out.append(
            SeedScores(
                run=run.id,
                seed=int(run.spec.flag("seed", 0)),
                gaps={key: values[mine] for key, values in gaps.items()},
                tokens=int(sum(len(recorded[i]) for i in rows)),
                rollouts=tuple(sorted({result["job"]["rollouts"][i] for i in rows})),
                replay=replay,
            )
        )
    return out


INJECT_FLAG = "embedded-inject"  # the planted fault's flag (harness/embedded/numeric_faults.py)


def fault_drift_scores(run: Run, levers: LeverFile, *, leave_one_out: bool = True) -> list[SeedScores]:
    """The planted fault's own drift under every lever setting, as one SeedScores: the run's tokens are
    re-scored twice at the same weights, with the fault and without it (the run's flags less
    --embedded-inject: its clean twin), and each sequence's gap under a setting is the mean over its
    tokens of what the fault does to the mismatch there, |(trainer - rollout) - (trainer' - rollout')|:
    how far it moves the faulted side, or nothing where a lever makes both sides compute the fault
    alike. Budgeted like a rung's drift (harness.judge.budget), a lever's add-one share is the part of
    it that aligning that boundary removes: the rung's own drift does not enter, so a fault whose drift
    is small beside the rung's can still be placed. (A difference of the two re-scores' |trainer -
    rollout| gaps would not do: a small move added to a larger gap of either sign averages out to
    nearly nothing. Nor would the sides' displacement |trainer - trainer'| + |rollout - rollout'|: a
    lever that hands the faulted operand to both sides doubles it while the mismatch it makes goes.)
    `leave_one_out` off scores no leave-one-out settings: the localisation reads the add-one shares
    only, and a control's test needs no more (it nearly halves the re-score)."""
    reason = _not_measured_reason(run)
    if reason is not None:
        raise NotMeasured(reason)
    if run.spec.flag(INJECT_FLAG) in (None, "none"):
        raise NotMeasured(f"run {run.id} plants no fault (--{INJECT_FLAG}): there is no clean twin to difference against")
    try:
        faulted = scores([run], levers, leave_one_out=leave_one_out)
        clean = scores([run], levers, without=(INJECT_FLAG,), leave_one_out=leave_one_out)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        raise NotMeasured(f"re-scoring failed: {str(exc).splitlines()[0]}") from None
    count = len(faulted["recorded"])

    def moved(key: str) -> list[np.ndarray]:
        f, c = faulted["settings"][key], clean["settings"][key]
        with np.errstate(invalid="ignore"):  # a token outside a kept set (-inf) gives NaN; _kept leaves it out
            return [
                np.abs(
                    (np.asarray(f["trainer"][i], dtype=np.float64) - np.asarray(f["rollout"][i], dtype=np.float64))
                    - (np.asarray(c["trainer"][i], dtype=np.float64) - np.asarray(c["rollout"][i], dtype=np.float64))
                )
                for i in range(count)
            ]

    per_token = {key: moved(key) for key in faulted["settings"]}
    kept, usable = _kept(per_token, count=count)
    gaps = {key: np.array([g[k].mean() for g, k, u in zip(values, kept, usable) if u]) for key, values in per_token.items()}
    replay = {
        **_replay_check("rollout", faulted["settings"][NATIVE]["rollout"], faulted["recorded"]),
        **_replay_check("trainer", faulted["settings"][NATIVE]["trainer"], faulted["job"]["recorded_trainer"]),
        "scorer_seconds": [faulted.get("seconds"), clean.get("seconds")],
        "tokens_left_out": int(sum((~k).sum() for k in kept)),
        # how widely the fault acts: a fault at an edge (the sampler's filter) moves few tokens
        "tokens_moved": int(sum((moved_by > 0).sum() for moved_by in per_token[NATIVE])),
        "clean_twin": f"the same flags less --{INJECT_FLAG} {run.spec.flag(INJECT_FLAG)}",
    }
    return [
        SeedScores(
            run=run.id,
            seed=int(run.spec.flag("seed", 0)),
            gaps=gaps,
            tokens=int(sum(len(r) for r in faulted["recorded"])),
            rollouts=tuple(sorted(set(faulted["job"]["rollouts"]))),
            replay=replay,
        )
    ]


def rung_budget(rung_id: str, runs: list[Run], knobs) -> object:
    """The rung's drift budget over its runs (one per seed), judged (harness.judge.budget.judge_budget),
    or BudgetNotMeasured with the reason: the one call the ladder's evidence and the main job's
    budget check make (evidence in, typed verdict out)."""
    from harness.judge.budget import BudgetInputError, judge_budget
    from harness.judge.evidence import BudgetNotMeasured

    if knobs.levers is None:
        return BudgetNotMeasured("knobs/ has no levers.yaml: no lever table to budget with")
    if rung_id not in knobs.levers.budget.rungs:
        return BudgetNotMeasured(f"{rung_id} is not one of knobs/levers.yaml budget.rungs ({', '.join(knobs.levers.budget.rungs)})")
    try:
        return judge_budget(rung_id, seed_scores(runs, knobs.levers), knobs.levers, knobs)
    except (NotMeasured, BudgetInputError) as why:
        return BudgetNotMeasured(str(why))
