"""How long a launched run may take: start-up plus rollouts x a per-stage step-time budget
(knobs/launch.yaml, each number with its reason), so a 100-rollout cluster run is not cut at a
fixed hour and a 3-rollout smoke run does not wait a day to be called stuck."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from harness.spec import backends
from harness.spec.schema import Strict


class Budget(Strict):
    start_up_s: float = Field(alias="start-up-s", gt=0)  # model load, engine start, first weight sync
    step_s: float = Field(alias="step-s", gt=0)  # one rollout + train step, generously
    why: str = Field(min_length=10)


class StageBudget(Strict):
    vime: Budget
    embedded: Budget


class Parallel(Strict):
    """How many runs one launcher keeps going at once (harness.launch.parallel)."""

    embedded: int | Literal["auto"] = Field("auto")  # auto: one a usable core, as memory allows
    vime: int = Field(1, ge=1)  # Ray jobs: the cluster schedules them; more than one only when the site has the nodes
    memory_per_run_gib: float = Field(alias="memory-per-run-gib", gt=0)
    why: str = Field(min_length=10)

    @field_validator("embedded")
    @classmethod
    def _at_least_one(cls, value):
        if isinstance(value, int) and value < 1:
            raise ValueError("auto or a whole number of runs, 1 or more")
        return value


class RunBudgets(Strict):
    stages: dict[str, StageBudget]
    parallel: Parallel | None = None


# When knobs/ has no launch.yaml (an older copy): the fixed limit launches had before it.
FALLBACK_TIMEOUT_S = 3600.0


def run_timeout(knobs, spec) -> tuple[float, str]:
    """(seconds, why) the launcher lets this run take."""
    budgets = knobs.budgets
    rollouts = spec.flags.get("num-rollout")
    if budgets is None or spec.stage not in budgets.stages or not isinstance(rollouts, int):
        return FALLBACK_TIMEOUT_S, f"no budget for stage {spec.stage} in launch.yaml: the fixed {FALLBACK_TIMEOUT_S:.0f} s"
    budget = getattr(budgets.stages[spec.stage], backends.backend(spec.backend).knob_section)
    seconds = budget.start_up_s + rollouts * budget.step_s
    return seconds, f"launch.yaml stages.{spec.stage}: {budget.start_up_s:.0f} s start-up + {rollouts} rollouts x {budget.step_s:.0f} s"
