"""knobs/effects.yaml, typed: each question's minimum effect of interest and every judged spec's seed spread.

A question's effect of interest E is a band around its reference's mean (a ladder rung's parent, an
A/B's baseline): either the **noise band**, z times the seed-to-seed spread of the reference's own
run mean measured on its A/A runs (the same spec at the design seeds), or a **user-facing margin**
named in `user_facing`, with the reason a reader wants that instead. No band pools several specs, so a
planted fault's spread never widens another question's band. Below the marker line
tools/design_sample.py writes what the A/A runs measured per spec (`measured.specs`), which the judge
also reads as the seed variance of a side judged on one seed (harness.judge.variance.SeedPrior).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from harness.spec.schema import Strict

EFFECTS_FILE = "effects.yaml"
MARKER = "# --- measured by tools/design_sample.py: do not edit by hand below this line ---"
ABS_DIFF_METRIC, REWARD_METRIC = "abs_diff", "reward"


class Documented(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class NoiseBand(Documented):
    z: float = Field(gt=0)
    """Standard deviations of a run's mean across seeds that make the band (2: its two-sided 95% width)."""
    reason: str = Field(min_length=10)


class UserFacing(Documented):
    relative: float = Field(gt=0, lt=1)
    """The margin as a share of the reference's mean."""
    reason: str = Field(min_length=10)
    """Why a reader wants this margin instead of the noise band, with the number it comes from."""


class Question(Documented):
    reference: str
    """The spec whose mean E is relative to and whose A/A spread makes the noise band: rung[@mode]."""
    metric: str = ABS_DIFF_METRIC
    """abs_diff (train/train_rollout_logprob_abs_diff) or reward (rollout/raw_reward)."""
    user_facing: str | None = None
    """A key of `user_facing`: this question is judged against that margin, not the noise band."""


class SpecSpread(Documented):
    mean: float
    """The mean of the spec's run means over the design seeds."""
    relative_sd: float = Field(ge=0)
    """The sample standard deviation of those run means over their mean."""
    df: float = Field(gt=0)
    """Seeds measured less one."""
    run_means: list[float] = Field(default_factory=list)


class Measured(Documented):
    seeds: list[int] = Field(min_length=2)
    """The design seeds the A/A runs were made at."""
    date: str = ""
    machine: str = ""
    specs: dict[str, dict[str, SpecSpread]] = Field(default_factory=dict)
    """spec (rung[@mode]) -> metric -> its spread across the design seeds."""


class Effects(Documented):
    noise_band: NoiseBand
    user_facing: dict[str, UserFacing] = Field(default_factory=dict)
    questions: dict[str, Question] = Field(min_length=1)
    """Question key (ladder/<rung>, ab/<pair or candidate>/<question>, ab/mode-consistency/<mode>) -> where its E comes from."""
    measured: Measured | None = None

    @model_validator(mode="after")
    def _user_facing_margins_exist(self) -> Effects:
        for key, question in self.questions.items():
            if question.user_facing is not None and question.user_facing not in self.user_facing:
                raise ValueError(
                    f"questions.{key}.user_facing: expected one of user_facing ({', '.join(self.user_facing) or 'none'}), got {question.user_facing!r}"
                )
        return self

    def spread(self, spec: str, metric: str = ABS_DIFF_METRIC) -> SpecSpread | None:
        """The A/A spread measured for `spec` (None: not measured)."""
        return ((self.measured.specs if self.measured else {}).get(spec) or {}).get(metric)
