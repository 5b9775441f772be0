"""The rule registry of spec validation, and the rules that hold on every backend.

A rule mirrors a check VIME or Megatron makes at start-up and explains itself in their terms, with
the numbers that broke it; it blames one flag (a Finding) and registers here with the backends it
holds on. Rules that only hold on a real VIME cluster live in harness/spec/vime_rules.py; the
validator (harness/spec/validate.py) imports both, this module first, so problems are listed in
the same order every time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.spec import backends
from harness.spec.errors import SpecError
from harness.spec.load import Knobs
from harness.spec.resolve import RunSpec

ALL_BACKENDS = frozenset(backends.names())
CLUSTER = frozenset(name for name in backends.names() if backends.backend(name).on_cluster)  # a records run is a VIME run that already happened


@dataclass(frozen=True)
class Finding:
    """A broken rule: the flag to change (None: the spec as a whole) and why, in VIME's terms."""

    flag: str | None
    message: str


Rule = Callable[[dict, RunSpec, Knobs], "Finding | str | None"]


@dataclass(frozen=True)
class RegisteredRule:
    check: Rule
    backends: frozenset[str]

    @property
    def name(self) -> str:
        return self.check.__name__.replace("_", "-")


RULES: list[RegisteredRule] = []


def rule(fn: Rule | None = None, *, backends: frozenset[str] = ALL_BACKENDS):
    def register(check: Rule) -> Rule:
        RULES.append(RegisteredRule(check, frozenset(backends)))
        return check

    return register(fn) if fn is not None else register


def whole(flags: dict, name: str, default: int) -> int:
    value = flags.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise SpecError(f"--{name}: expected a whole number, got {value!r}")
    return int(value)


def actor_gpus(flags: dict) -> int:
    return whole(flags, "actor-num-nodes", 1) * whole(flags, "actor-num-gpus-per-node", 1)


# --------------------------------------------------------------- rules that hold on every backend


@rule
def rollout_count_given(flags, spec, knobs):
    if "num-rollout" not in flags and "num-epoch" not in flags:
        return Finding("num-rollout", "VIME requires --num-rollout or --num-epoch; neither is set")


@rule
def model_parallel_divides_world(flags, spec, knobs):
    tp, pp, cp = (whole(flags, f, 1) for f in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size"))
    world = actor_gpus(flags)
    if world % (tp * pp * cp):
        return Finding(
            "tensor-model-parallel-size",
            f"Megatron needs TP x PP x CP to divide the trainer's GPUs (world size = actor-num-nodes x "
            f"actor-num-gpus-per-node = {world}): {tp} x {pp} x {cp} = {tp * pp * cp} does not divide {world}",
        )


@rule
def experts_divisible_by_ep(flags, spec, knobs):
    ep = whole(flags, "expert-model-parallel-size", 1)
    if "num-experts" in flags and whole(flags, "num-experts", 1) % ep:
        return Finding(
            "expert-model-parallel-size", f"Megatron needs --num-experts ({flags['num-experts']}) divisible by --expert-model-parallel-size ({ep})"
        )
    etp, pp = whole(flags, "expert-tensor-parallel-size", 1), whole(flags, "pipeline-model-parallel-size", 1)
    if actor_gpus(flags) % (ep * etp * pp):
        return Finding(
            "expert-model-parallel-size",
            f"Megatron needs EP x ETP x PP to divide the trainer's GPUs: {ep} x {etp} x {pp} = {ep * etp * pp} does not divide {actor_gpus(flags)}",
        )


@rule
def colocate_rollout_gpus(flags, spec, knobs):
    if flags.get("colocate") and "rollout-num-gpus" in flags and whole(flags, "rollout-num-gpus", 0) != actor_gpus(flags):
        return Finding(
            "rollout-num-gpus",
            f"with --colocate VIME forces the rollout onto the trainer's {actor_gpus(flags)} GPUs, "
            f"but --rollout-num-gpus is {flags['rollout-num-gpus']}: set them equal",
        )


@rule
def rollout_gpus_divisible_by_engine(flags, spec, knobs):
    total, per_engine = whole(flags, "rollout-num-gpus", 1), whole(flags, "rollout-num-gpus-per-engine", 1)
    if per_engine < 1 or total % per_engine:
        return Finding(
            "rollout-num-gpus-per-engine", f"--rollout-num-gpus ({total}) must be a multiple of --rollout-num-gpus-per-engine ({per_engine})"
        )


@rule
def dynamic_batch_needs_token_budget(flags, spec, knobs):
    if flags.get("use-dynamic-batch-size") and "max-tokens-per-gpu" not in flags:
        return Finding("use-dynamic-batch-size", "VIME: --use-dynamic-batch-size requires --max-tokens-per-gpu")


@rule
def global_batch_divides_rollout(flags, spec, knobs):
    samples = whole(flags, "rollout-batch-size", 1) * whole(flags, "n-samples-per-prompt", 1)
    if "num-steps-per-rollout" in flags:
        steps = whole(flags, "num-steps-per-rollout", 1)
        if samples % steps:
            return Finding(
                "num-steps-per-rollout", f"--num-steps-per-rollout ({steps}) must divide rollout-batch-size x n-samples-per-prompt ({samples})"
            )
        if "global-batch-size" in flags and whole(flags, "global-batch-size", 0) != samples // steps:
            return Finding(
                "global-batch-size",
                f"VIME asserts --global-batch-size ({flags['global-batch-size']}) == rollout-batch-size x "
                f"n-samples-per-prompt // num-steps-per-rollout ({samples} // {steps} = {samples // steps})",
            )
        return None
    gbs = whole(flags, "global-batch-size", samples)
    if gbs < 1 or samples % gbs:
        return Finding(
            "global-batch-size",
            f"VIME drops the remainder of a rollout, so --global-batch-size ({gbs}) must divide "
            f"rollout-batch-size x n-samples-per-prompt ({samples})",
        )
    dp = actor_gpus(flags) // max(
        1, whole(flags, "tensor-model-parallel-size", 1) * whole(flags, "pipeline-model-parallel-size", 1) * whole(flags, "context-parallel-size", 1)
    )
    if gbs < dp:
        return Finding(
            "global-batch-size", f"each training step needs at least one sample per data-parallel rank: --global-batch-size {gbs} < DP size {dp}"
        )


@rule
def tis_excludes_rollout_logprobs(flags, spec, knobs):
    if flags.get("use-tis") and flags.get("use-rollout-logprobs"):
        return Finding("use-rollout-logprobs", "VIME: --use-tis cannot be combined with --use-rollout-logprobs")


@rule
def sampling_parameters_in_range(flags, spec, knobs):
    top_p = flags.get("rollout-top-p", 1.0)
    if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
        return Finding("rollout-top-p", f"--rollout-top-p must be in (0, 1], got {top_p!r}")
    temperature = flags.get("rollout-temperature", 1.0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature <= 0:
        return Finding("rollout-temperature", f"--rollout-temperature must be > 0, got {temperature!r}")
    if whole(flags, "rollout-top-k", -1) < -1:
        return Finding("rollout-top-k", f"--rollout-top-k must be -1 (off) or a positive count, got {flags['rollout-top-k']!r}")


@rule(backends=CLUSTER)
def stage_has_the_gpus(flags, spec, knobs):
    stage = knobs.stages[spec.stage]
    rollout = 0 if flags.get("colocate") else whole(flags, "rollout-num-gpus", 0)
    needed = actor_gpus(flags) + rollout
    if needed > stage.gpus:
        return Finding(
            "actor-num-nodes",
            f"stage {spec.stage} has {stage.gpus} GPUs on {stage.nodes} node(s), but this run needs "
            f"{actor_gpus(flags)} trainer + {rollout} rollout = {needed}",
        )
