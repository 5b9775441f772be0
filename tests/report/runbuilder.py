"""Run directories for the record tests, written with the real writers (harness.records.rundir).

The metric series are given by the test (so expected figures are computed from the same inputs,
never hard-coded) and stored exactly as a launched run stores them: spec.yaml from a resolved
spec, metrics.jsonl records of kinds step / rollout / perf, log.txt, status.json.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.records.models import Failure
from harness.records.rundir import RunDir

CPU_ENVIRONMENT = {
    "hardware": {
        "gpus": {"count": 0, "note": "nvidia-smi not found"},
        "cpu": {"model": "Test CPU", "cores": 2, "memory_gib": 24.0, "machine": "x86_64"},
        "nodes": {"count": 1, "source": "this host only"},
    },
    "versions": {"python": "3.11.7"},
}
PERF_PARTS = ("perf/rollout_time", "perf/log_probs_time", "perf/update_weights_time", "perf/train_time")


def resolved_spec(stage: str, rung: str, mode: str = "colocate", backend: str = "embedded", **overrides) -> dict:
    """A real resolved spec from knobs/ (the same resolve() the launcher uses)."""
    from harness import DEFAULT_KNOBS_DIR
    from harness.spec import load_knobs, resolve

    return resolve(load_knobs(DEFAULT_KNOBS_DIR), stage, rung, mode, backend, overrides).to_dict()


def noisy(level: float, steps: int, seed: int, rel_noise: float = 0.05) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(level * (1 + rel_noise * rng.standard_normal())) for _ in range(steps)]


def make_run(
    root: Path,
    name: str,
    spec: dict | None,
    *,
    abs_diff: list[float] | None = None,
    reward: list[float] | None = None,
    perf: dict[str, list[float]] | None = None,
    state: str = "finished",
    failure: Failure | None = None,
    log_lines: list[str] | None = None,
    environment: dict | None = CPU_ENVIRONMENT,
    argv: list[str] | None = None,
):
    """Write a run directory and load it back as a `Run`."""
    run_dir = RunDir(Path(root) / name).create()
    if spec is not None:
        run_dir.write_spec(spec)
        run_dir.write_argv(argv if argv is not None else [f"--{k}" if v is True else f"--{k}={v}" for k, v in spec["flags"].items()])
    if environment is not None:
        run_dir.write_environment(environment)
    steps = max(len(abs_diff or []), len(reward or []), *(len(v) for v in (perf or {}).values()), 0)
    with run_dir:
        for line in log_lines or []:
            run_dir.append_log(line)
        for n in range(steps):
            if reward and n < len(reward):
                run_dir.append_record({"kind": "rollout", "n": n, "metrics": {"rollout/raw_reward": reward[n]}})
            timings = {name: values[n] for name, values in (perf or {}).items() if n < len(values)}
            if timings:
                run_dir.append_record({"kind": "perf", "n": n, "metrics": timings})
            if abs_diff and n < len(abs_diff):
                run_dir.append_record({"kind": "step", "n": n, "metrics": {"train/train_rollout_logprob_abs_diff": abs_diff[n]}})
    run_dir.set_status(state, failure=failure, exit_code=0 if state == "finished" else 1)
    return run_dir.load()


def perf_series(steps: int, seed: int) -> dict[str, list[float]]:
    parts = {name: noisy(level, steps, seed + i) for i, (name, level) in enumerate(zip(PERF_PARTS, (6.0, 1.5, 0.8, 3.0)))}
    parts["perf/step_time"] = [sum(values) + 0.4 for values in zip(*parts.values())]
    return parts
