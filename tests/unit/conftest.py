"""Runs built to pass and runs built to fail, for testing the checks (Megatron tests its checker
with fake metric sources the same way). Each run is a real run directory: VIME-format log lines
parsed by the real parser, so the checks see exactly what a launched run would give them."""

from __future__ import annotations

import math

import pytest

from harness.records.logparse import LogParser
from harness.records.models import Record
from harness.records.rundir import RunDir


def vime_line(kind: str, n: int, metrics: dict) -> str:
    body = ", ".join(f"'{k}': {('nan' if isinstance(v, float) and math.isnan(v) else repr(v))}" for k, v in metrics.items())
    return f"[2026-11-20 10:00:{n % 60:02d}] train.py:412 - {kind} {n}: {{{body}}}"


def write_run(path, spec: dict, lines: list[str], state: str = "finished", argv: list[str] | None = None, environment: dict | None = None):
    """A real run directory at `path`: `spec` (and `argv`, `environment` when given), the log `lines`
    and the records the real parser reads from them, then its status; returns the loaded Run."""
    run_dir = RunDir(path).create()
    run_dir.write_spec(spec)
    if argv is not None:
        run_dir.write_argv(argv)
    if environment is not None:
        run_dir.write_environment(environment)
    parser = LogParser()
    for line in lines:
        run_dir.append_log(line)
        for item in parser.feed(line):
            if isinstance(item, Record):
                run_dir.append_record(item)
    run_dir.set_status(state, exit_code=0 if state == "finished" else 1)
    run_dir.close()
    return run_dir.load()


@pytest.fixture
def build_run(tmp_path):
    def build(
        name="run",
        steps=30,
        abs_diff=lambda n: 0.02,
        reward=lambda n: 0.4,
        extra_lines=(),
        rung="fp8-plus-filters",
        mode="colocate",
        backend="embedded",
        seed=1234,
        state="finished",
        environment=None,
        drop_metric_at=(),
    ):
        lines = []
        for n in range(steps):
            step = {"train/loss": 0.1, "train/step": n}
            if n not in drop_metric_at:
                step["train/train_rollout_logprob_abs_diff"] = abs_diff(n)
            lines.append(vime_line("step", n, step))
            lines.append(vime_line("rollout", n, {"rollout/raw_reward": reward(n)}))
        lines.extend(extra_lines)
        return write_run(
            tmp_path / name,
            {"run_id": name, "stage": "p1", "rung": rung, "mode": mode, "backend": backend, "flags": {"seed": seed, "num-rollout": steps}},
            lines,
            state,
            argv=["python", "-m", "harness.embedded.train", "--num-rollout", str(steps)],
            environment=environment
            if environment is not None
            else {
                "harness": {"commit": "0123456789abcdef"},
                # What harness.records.environment writes on a host in no container: no image, no hints.
                "container": {
                    "image": None,
                    "source": None,
                    "container_hints": [],
                    "note": "pass the image explicitly: the environment does not name it",
                },
                "hardware": {"gpus": {"count": 0}, "cpu": {"model": "test cpu"}},
            },
        )

    return build


@pytest.fixture
def made_budget():
    """made_budget(rung, verdict, boundary=None): a drift budget (see _made_budget)."""
    return _made_budget


def _made_budget(rung: str, verdict: str, boundary: str | None = None):
    """A drift budget as harness.judge.budget returns it, with the verdict given (the decision itself
    is tested in test_budget_judge.py): evidence for the drift-class step it decides."""
    from harness.judge.budget import Estimate, RungBudget

    zero = Estimate(0.0, 0.0, 0.0, 0.0, 1.0)
    reason = f"{verdict}" + (f" to {boundary}: aligning it alone removes 80% of the drift" if boundary else ": no boundary alone removes 50%")
    return RungBudget(rung, ("child",), (1,), 1e-3, 1e-5, zero, (), verdict, boundary, 0.5, 3.0, 96, 1900, {}, reason)
