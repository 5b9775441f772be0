"""Reject, before anything is launched, what VIME or Megatron would reject at start-up.

Each rule mirrors a check VIME or Megatron makes (../shared/facts/vime.md) and explains itself in
their terms, with the numbers that broke it.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.spec.errors import SpecError
from harness.spec.load import Knobs
from harness.spec.resolve import RunSpec

Rule = Callable[[dict, RunSpec, Knobs], "str | None"]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def _int(flags: dict, name: str, default: int) -> int:
    value = flags.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise SpecError(f"--{name}: expected a whole number, got {value!r}")
    return int(value)


def actor_gpus(flags: dict) -> int:
    return _int(flags, "actor-num-nodes", 1) * _int(flags, "actor-num-gpus-per-node", 1)


@rule
def rollout_count_given(flags, spec, knobs):
    if "num-rollout" not in flags and "num-epoch" not in flags:
        return "VIME requires --num-rollout or --num-epoch; neither is set"


@rule
def model_parallel_divides_world(flags, spec, knobs):
    tp, pp, cp = (_int(flags, f, 1) for f in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size"))
    world = actor_gpus(flags)
    if world % (tp * pp * cp):
        return (f"Megatron needs TP x PP x CP to divide the trainer's GPUs: {tp} x {pp} x {cp} = {tp * pp * cp} "
                f"does not divide actor-num-nodes x actor-num-gpus-per-node = {world}")


@rule
def experts_divisible_by_ep(flags, spec, knobs):
    ep = _int(flags, "expert-model-parallel-size", 1)
    if "num-experts" in flags and _int(flags, "num-experts", 1) % ep:
        return f"Megatron needs --num-experts ({flags['num-experts']}) divisible by --expert-model-parallel-size ({ep})"
    etp, pp = _int(flags, "expert-tensor-parallel-size", 1), _int(flags, "pipeline-model-parallel-size", 1)
    if actor_gpus(flags) % (ep * etp * pp):
        return (f"Megatron needs EP x ETP x PP to divide the trainer's GPUs: {ep} x {etp} x {pp} = {ep * etp * pp} "
                f"does not divide {actor_gpus(flags)}")


@rule
def colocate_rollout_gpus(flags, spec, knobs):
    if flags.get("colocate") and "rollout-num-gpus" in flags and _int(flags, "rollout-num-gpus", 0) != actor_gpus(flags):
        return (f"with --colocate VIME forces the rollout onto the trainer's {actor_gpus(flags)} GPUs, "
                f"but --rollout-num-gpus is {flags['rollout-num-gpus']}: set them equal")


@rule
def rollout_gpus_divisible_by_engine(flags, spec, knobs):
    total, per_engine = _int(flags, "rollout-num-gpus", 1), _int(flags, "rollout-num-gpus-per-engine", 1)
    if per_engine < 1 or total % per_engine:
        return f"--rollout-num-gpus ({total}) must be a multiple of --rollout-num-gpus-per-engine ({per_engine})"


@rule
def dynamic_batch_needs_token_budget(flags, spec, knobs):
    if flags.get("use-dynamic-batch-size") and "max-tokens-per-gpu" not in flags:
        return "VIME: --use-dynamic-batch-size requires --max-tokens-per-gpu"


@rule
def global_batch_divides_rollout(flags, spec, knobs):
    samples = _int(flags, "rollout-batch-size", 1) * _int(flags, "n-samples-per-prompt", 1)
    if "num-steps-per-rollout" in flags:
        steps = _int(flags, "num-steps-per-rollout", 1)
        if samples % steps:
            return f"--num-steps-per-rollout ({steps}) must divide rollout-batch-size x n-samples-per-prompt ({samples})"
        return None
    gbs = _int(flags, "global-batch-size", samples)
    if gbs < 1 or samples % gbs:
        return (f"VIME drops the remainder of a rollout, so --global-batch-size ({gbs}) must divide "
                f"rollout-batch-size x n-samples-per-prompt ({samples})")
    dp = actor_gpus(flags) // max(1, _int(flags, "tensor-model-parallel-size", 1) * _int(flags, "pipeline-model-parallel-size", 1) * _int(flags, "context-parallel-size", 1))
    if gbs < dp:
        return f"each training step needs at least one sample per data-parallel rank: --global-batch-size {gbs} < DP size {dp}"


@rule
def tis_excludes_rollout_logprobs(flags, spec, knobs):
    if flags.get("use-tis") and flags.get("use-rollout-logprobs"):
        return "VIME: --use-tis cannot be combined with --use-rollout-logprobs"


@rule
def sampling_parameters_in_range(flags, spec, knobs):
    top_p = flags.get("rollout-top-p", 1.0)
    if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
        return f"--rollout-top-p must be in (0, 1], got {top_p!r}"
    temperature = flags.get("rollout-temperature", 1.0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature <= 0:
        return f"--rollout-temperature must be > 0, got {temperature!r}"
    if _int(flags, "rollout-top-k", -1) < -1:
        return f"--rollout-top-k must be -1 (off) or a positive count, got {flags['rollout-top-k']!r}"


@rule
def stage_has_the_gpus(flags, spec, knobs):
    if spec.backend == "embedded":
        return None
    stage = knobs.stages[spec.stage]
    rollout = 0 if flags.get("colocate") else _int(flags, "rollout-num-gpus", 0)
    needed = actor_gpus(flags) + rollout
    if needed > stage.gpus:
        return (f"stage {spec.stage} has {stage.gpus} GPUs on {stage.nodes} node(s), but this run needs "
                f"{actor_gpus(flags)} trainer + {rollout} rollout = {needed}")


def validate(spec: RunSpec, knobs: Knobs) -> RunSpec:
    """Raise SpecError listing every rule the resolved spec breaks; return the spec otherwise."""
    problems = []
    for check in RULES:
        try:
            message = check(spec.flags, spec, knobs)
        except SpecError as err:
            message = "; ".join(err.problems)
        if message:
            problems.append(f"{spec.run_id}: {message}")
    if problems:
        raise SpecError(problems)
    return spec
