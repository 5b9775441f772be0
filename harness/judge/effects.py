"""Each question's minimum effect of interest E and each spec's seed variance, from knobs/effects.yaml.

E is a band around the question's reference mean (a rung's parent, an A/B's baseline): the noise band
(z x the reference spec's own seed-to-seed spread, measured on its A/A runs at the design seeds) or a
user-facing margin the file names with its reason; for abs-diff never below thresholds.rung_min_abs_delta.
A question or spec the file does not carry is a SpecError naming the key: a question is never judged
against a band borrowed from another.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.judge.variance import SeedPrior
from harness.records.metric_names import ABS_DIFF, RAW_REWARD
from harness.spec import Knobs, SpecError
from harness.spec.effects_file import ABS_DIFF_METRIC, EFFECTS_FILE, REWARD_METRIC

__all__ = ["Effect", "question_effect", "seed_prior", "pair_prior", "pair_key", "spec_key", "ladder_question", "ab_question", "mode_question"]


@dataclass(frozen=True)
class Effect:
    value: float  # E (or the allowed drop M), in the metric's units
    relative: float  # the band as a share of the reference's mean
    reference: str
    rule: str  # how it was made, for the record

    def as_dict(self) -> dict:
        return asdict(self)


def spec_key(rung: str, mode: str = "colocate") -> str:
    """A spec as effects.yaml names it: the rung, and the mode when not colocate. No stage: on the
    embedded backend every stage runs the same profile (knobs/stages.yaml), so P1's and P3's runs of a
    rung are one run."""
    return rung + ("" if mode == "colocate" else f"@{mode}")


def ladder_question(rung_id: str) -> str:
    return f"ladder/{rung_id}"


def ab_question(candidate: str | None, question: str) -> str:
    return f"ab/{candidate or 'pair'}/{question}"


def mode_question(mode: str) -> str:
    return f"ab/mode-consistency/{mode}"


def _where(knobs: Knobs, key: str) -> str:
    return f"{knobs.root / EFFECTS_FILE}: {key}"


def question_effect(knobs: Knobs, question: str, reference_mean: float) -> Effect:
    """E for `question` at its reference's measured mean (the allowed drop M for a reward question)."""
    effects = knobs.effects
    if effects is None or question not in effects.questions:
        raise SpecError(
            f"{_where(knobs, 'questions.' + question)}: expected the question's effect of interest (its reference spec, or a user-facing margin)"
        )
    entry = effects.questions[question]
    if entry.user_facing is not None:
        relative = effects.user_facing[entry.user_facing].relative
        rule = f"user-facing margin {entry.user_facing!r}: {relative:.1%} of {entry.reference}'s mean"
    else:
        spread = effects.spread(entry.reference, entry.metric)
        if spread is None:
            raise SpecError(
                f"{_where(knobs, f'measured.specs.{entry.reference}.{entry.metric}')}: expected the A/A spread of the question's reference (tools/design_sample.py --write)"
            )
        relative = effects.noise_band.z * spread.relative_sd
        seeds = effects.measured.seeds
        rule = (
            f"noise band: {effects.noise_band.z:g} x {entry.reference}'s seed-to-seed spread {spread.relative_sd:.2%} "
            f"(A/A at design seeds {seeds[0]}-{seeds[-1]}) = {relative:.2%} of its mean"
        )
    value = relative * abs(float(reference_mean))
    if entry.metric == ABS_DIFF_METRIC:
        floor = float(knobs.threshold("rung_min_abs_delta"))
        if floor > value:
            rule += f"; below thresholds.rung_min_abs_delta, which applies ({floor:g})"
        value = max(floor, value)
    return Effect(value, relative, entry.reference, rule)


def seed_prior(knobs: Knobs, spec: str, metric: str = ABS_DIFF_METRIC) -> SeedPrior | None:
    """The seed spread the A/A runs measured for `spec`: what a side of one seed adds to its own steps' noise."""
    spread = knobs.effects.spread(spec, metric) if knobs.effects is not None else None
    if spread is None:
        return None
    return SeedPrior(spread.relative_sd, spread.df, f"{spec} A/A at seeds {knobs.effects.measured.seeds}")


# The A/B's metrics as VIME logs them -> the names effects.yaml measures them under.
_METRICS = {ABS_DIFF: ABS_DIFF_METRIC, RAW_REWARD: REWARD_METRIC}


def pair_key(candidate: str) -> str:
    """The spec name effects.yaml gives an A/B pair's step-by-step differences (candidate - baseline)."""
    return f"ab/{candidate}"


def pair_prior(knobs: Knobs, candidate: str, metric: str, baseline_mean: float) -> SeedPrior | None:
    """The seed spread of one pair's mean difference, measured on the design's pairs relative to their
    baselines' mean, at this baseline's mean: what a single pair adds to its steps' noise."""
    name = _METRICS.get(metric)
    prior = seed_prior(knobs, pair_key(candidate), name) if name else None
    return None if prior is None else SeedPrior(prior.relative_sd, prior.df, prior.source, scale=abs(float(baseline_mean)))
