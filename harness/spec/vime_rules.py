"""The checks VIME's parse_args() and Megatron's validate_args() make at start-up, before a job
is submitted: the flag table (every rendered flag exists, switches take no value, values fit their
type and choices) and the cross-flag rules that touch this experiment.

Each rule names where VIME or Megatron makes the check (repository, file, commit as read; the
commits are the ones in knobs/vime/flags-rl-align.yaml's `sources`). Rules that only one VIME line
has say which. They run for the cluster backends (vime, records); the embedded trainer checks
its own argv (harness/embedded/flags.py). The mitigation flags' rules at the end (TIS, rollout
routing replay) hold on every backend: the embedded trainer takes the same flags.
"""

from __future__ import annotations

from harness.spec import backends
from harness.spec.cluster import vime_line
from harness.spec.rules import ALL_BACKENDS, CLUSTER, Finding, rule, whole
from harness.spec.vime_flags import flag_problem, load_flag_table

VIME_ARGS = "RL-Align/vime vime/utils/arguments.py@e972c37"
VLLM_ARGS = "RL-Align/vime vime/backends/vllm_utils/arguments.py@d50772b"
VLLM_ENGINE = "RL-Align/vime vime/backends/vllm_utils/vllm_engine.py@6c03169"
RLK_SWITCH = "RL-Align/vime vime/utils/rl_kernel.py@72bd520"
RLK_RUNTIME = "RL-Align/vime vime/backends/megatron_utils/rl_kernel.py@0cd0135"
MEGATRON_ARGS_VIME = "RL-Align/vime vime/backends/megatron_utils/arguments.py@82904ec"
MEGATRON_ARGS = "NVIDIA/Megatron-LM megatron/training/arguments.py@1dcf0da"
MEGATRON_CONFIG = "NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py@1dcf0da"


@rule(backends=CLUSTER)
def vime_flag_table(flags, spec, knobs):
    """Every flag against the line's table: one finding per flag."""
    table = load_flag_table(knobs.root, vime_line(knobs))
    return [Finding(name, problem) for name, value in flags.items() if (problem := flag_problem(name, value, table))]


@rule(backends=CLUSTER)
def model_architecture_given(flags, spec, knobs):
    if "num-layers" not in flags:
        return Finding(
            "num-layers",
            f"Megatron stops with 'either num-layers or encoder-num-layers should be specified' "
            f"({MEGATRON_ARGS} validate_args): name the model in base.yaml `model.vime` "
            f"(knobs/models/) so its architecture flags are rendered",
        )


@rule(backends=CLUSTER)
def rollout_batch_size_given(flags, spec, knobs):
    if "rollout-batch-size" not in flags:
        return Finding("rollout-batch-size", f"VIME's parser declares --rollout-batch-size required=True ({VIME_ARGS})")


@rule(backends=CLUSTER)
def trainer_precision_is_bf16(flags, spec, knobs):
    if not flags.get("bf16") and not flags.get("fp16"):
        return Finding(
            "bf16",
            f"VIME trains in bf16 whatever the flags: it sets args.bf16 = not args.fp16 "
            f"({MEGATRON_ARGS_VIME}), so a spec without --bf16 would claim an fp32 trainer it does not get",
        )


@rule(backends=CLUSTER)
def top_p_replay_needs_top_k(flags, spec, knobs):
    """RL-Align only: its vLLM side refuses top-p sampling without a top-k cut (the replay needs it)."""
    if vime_line(knobs) != "rl-align":
        return None
    top_p, top_k = flags.get("rollout-top-p", 1.0), flags.get("rollout-top-k", -1)
    if top_p != 1.0 and isinstance(top_k, int) and top_k <= 0:
        return Finding(
            "rollout-top-p",
            f"RL-Align's vLLM side raises 'vLLM top-p sampling replay requires --rollout-top-k > 0' "
            f"({VLLM_ARGS} validate_args): --rollout-top-p {top_p} with --rollout-top-k {top_k}",
        )


@rule(backends=CLUSTER)
def experts_needed_for_expert_parallelism(flags, spec, knobs):
    if whole(flags, "expert-model-parallel-size", 1) > 1 and "num-experts" not in flags:
        return Finding(
            "expert-model-parallel-size", f"Megatron: 'num_experts must be non None to use expert model parallelism' ({MEGATRON_ARGS} validate_args)"
        )


@rule(backends=CLUSTER)
def attention_heads_divisible_by_tp(flags, spec, knobs):
    tp = whole(flags, "tensor-model-parallel-size", 1)
    for name in ("num-attention-heads", "num-query-groups"):
        if name in flags and whole(flags, name, 1) % tp:
            return Finding(
                "tensor-model-parallel-size",
                f"Megatron needs --{name} ({flags[name]}) divisible by --tensor-model-parallel-size ({tp}) "
                f"({MEGATRON_CONFIG} TransformerConfig.__post_init__)",
            )


@rule(backends=CLUSTER)
def trainer_fits_a_node(flags, spec, knobs):
    per_node = whole(flags, "num-gpus-per-node", 8)
    if whole(flags, "actor-num-gpus-per-node", 8) > per_node:
        return Finding(
            "actor-num-gpus-per-node",
            f"--actor-num-gpus-per-node ({flags.get('actor-num-gpus-per-node')}) exceeds the GPUs of one node "
            f"(--num-gpus-per-node {per_node}): Ray cannot place the trainer's per-node bundle",
        )


@rule(backends=CLUSTER)
def colocate_node_size_matches_trainer(flags, spec, knobs):
    """With --colocate VIME overrides num_gpus_per_node with actor_num_gpus_per_node (a log line only)."""
    if flags.get("colocate") and whole(flags, "num-gpus-per-node", 8) != whole(flags, "actor-num-gpus-per-node", 8):
        return Finding(
            "actor-num-gpus-per-node",
            f"with --colocate VIME replaces --num-gpus-per-node ({flags.get('num-gpus-per-node', 8)}) by "
            f"--actor-num-gpus-per-node ({flags.get('actor-num-gpus-per-node', 8)}) ({VIME_ARGS} vime_validate_args): "
            f"a colocated trainer must fill whole nodes",
        )


@rule(backends=CLUSTER)
def split_rollout_gpus_given(flags, spec, knobs):
    if not flags.get("colocate") and not whole(flags, "rollout-num-gpus", 0):
        return Finding("rollout-num-gpus", "without --colocate VIME needs --rollout-num-gpus (its default, None, leaves the rollout engines no GPUs)")


@rule(backends=CLUSTER)
def engine_gpus_divide_into_vllm_parallelism(flags, spec, knobs):
    """VIME sizes vLLM's TP as rollout-num-gpus-per-engine // (PP x PCP x DP): a remainder is lost."""
    per_engine = whole(flags, "rollout-num-gpus-per-engine", 1)
    other = 1
    for name in ("vllm-pipeline-parallel-size", "vllm-prefill-context-parallel-size", "vllm-data-parallel-size"):
        other *= whole(flags, name, 1)
    if per_engine % other or per_engine // other < 1:
        return Finding(
            "rollout-num-gpus-per-engine",
            f"VIME sets vLLM's tensor-parallel size to --rollout-num-gpus-per-engine ({per_engine}) // "
            f"(vLLM PP x PCP x DP = {other}) ({VLLM_ARGS} vllm_parse_args): it must divide exactly and be >= 1",
        )


@rule(backends=CLUSTER)
def over_sampling_covers_the_batch(flags, spec, knobs):
    if "over-sampling-batch-size" in flags and whole(flags, "over-sampling-batch-size", 1) < whole(flags, "rollout-batch-size", 1):
        return Finding("over-sampling-batch-size", f"VIME asserts over_sampling_batch_size >= rollout_batch_size ({VIME_ARGS})")


@rule(backends=CLUSTER)
def kl_settings_are_consistent(flags, spec, knobs):
    kl_coef, kl_loss_coef = flags.get("kl-coef", 0.0), flags.get("kl-loss-coef", 0.0)
    if (kl_coef or flags.get("use-kl-loss")) and "ref-load" not in flags:
        return Finding(
            "use-kl-loss" if flags.get("use-kl-loss") else "kl-coef",
            f"VIME opens --ref-load when a KL term is on ({VIME_ARGS} vime_validate_args); none is set",
        )
    if kl_coef and kl_loss_coef:
        return Finding("kl-coef", f"VIME asserts 'Only one of kl_coef and kl_loss_coef can be set' ({VIME_ARGS})")


@rule(backends=CLUSTER)
def balance_by_flops_needs_dynamic_batch(flags, spec, knobs):
    if flags.get("balance-by-flops") and not flags.get("use-dynamic-batch-size"):
        return Finding("balance-by-flops", f"VIME asserts '--balance-by-flops requires --use-dynamic-batch-size' ({VIME_ARGS})")


@rule(backends=CLUSTER)
def mismatch_metrics_need_tis_function(flags, spec, knobs):
    if flags.get("get-mismatch-metrics") and "custom-tis-function-path" not in flags:
        return Finding("get-mismatch-metrics", f"VIME asserts custom_tis_function_path must be set when get_mismatch_metrics is set ({VIME_ARGS})")


# The vLLM engine arguments VIME writes itself when it launches a server, after which a --vllm-<name>
# for the same field is skipped (`if field_name in kwargs: continue`, VLLM_ENGINE _compute_server_args):
# a different value would be dropped without a word. Field -> the value VIME sets.
VLLM_FIELDS_VIME_SETS = {
    "vllm-logprobs-mode": "processed_logprobs",
    "vllm-enable-prompt-tokens-details": True,
    "vllm-enable-server-load-tracking": True,
}
# RL-Kernel operators VIME calls when listed in --rl-kernel-ops (RLK_RUNTIME: maybe_compute_logp,
# maybe_compute_linear_logp, each behind is_rl_kernel_op_enabled(args, op)).
RL_KERNEL_OPS = ("linear_logp", "logp")


@rule(backends=CLUSTER)
def vllm_fields_vime_sets(flags, spec, knobs):
    """VIME overrides these engine fields; another value through --vllm-* never reaches vLLM."""
    return [
        Finding(
            name,
            f"--{name} {flags[name]!r} never reaches vLLM: VIME launches every engine with {name.removeprefix('vllm-').replace('-', '_')}="
            f"{vime!r} and skips a --vllm-* value for a field it set ({VLLM_ENGINE} _compute_server_args)",
        )
        for name, vime in VLLM_FIELDS_VIME_SETS.items()
        if name in flags and flags[name] is not None and flags[name] != vime
    ]


def rl_kernel_ops(flags) -> tuple[str, ...]:
    """The RL-Kernel operators --rl-kernel-ops lists (VIME splits the value on commas)."""
    value = flags.get("rl-kernel-ops")
    items = value if isinstance(value, list) else [value] if value not in (None, False, True) else []
    return tuple(op.strip() for item in items for op in str(item).split(",") if op.strip())


@rule(backends=CLUSTER)
def rl_kernel_ops_run(flags, spec, knobs):
    """An RL-Kernel operator runs only when --enable-rl-kernel is on and the operator is listed."""
    ops = rl_kernel_ops(flags)
    unknown = [op for op in ops if op not in RL_KERNEL_OPS]
    if unknown:
        return Finding(
            "rl-kernel-ops",
            f"--rl-kernel-ops lists {', '.join(unknown)}, which VIME never calls (it asks is_rl_kernel_op_enabled for "
            f"{' and '.join(RL_KERNEL_OPS)} only, {RLK_RUNTIME}): the run would measure the native path",
        )
    if ops and not flags.get("enable-rl-kernel"):
        return Finding(
            "enable-rl-kernel",
            f"--rl-kernel-ops {','.join(ops)} without --enable-rl-kernel: VIME runs an RL-Kernel operator only when "
            f"args.enable_rl_kernel is set and the operator is listed ({RLK_SWITCH} is_rl_kernel_op_enabled)",
        )
    if flags.get("enable-rl-kernel") and not ops:
        return Finding(
            "rl-kernel-ops",
            f"--enable-rl-kernel without --rl-kernel-ops: VIME's allowlist defaults to empty ({VIME_ARGS} "
            f"add_rl_kernel_arguments: default=()), so no operator would run; list one, e.g. --rl-kernel-ops linear_logp",
        )
    return None


@rule(backends=CLUSTER)
def linear_logp_runs_without_fallback(flags, spec, knobs):
    """RL-Kernel's linear_logp falls back to VIME's native path (or stops, strict) where its runtime
    cannot run: context parallelism, or an entropy the loss needs."""
    if not flags.get("enable-rl-kernel") or "linear_logp" not in rl_kernel_ops(flags):
        return None
    what = "stops with 'RL-Kernel linear_logp is enabled but unavailable'" if flags.get("rl-kernel-strict") else "falls back to the native path"
    if whole(flags, "context-parallel-size", 1) > 1 or flags.get("allgather-cp"):
        return Finding(
            "context-parallel-size",
            f"RL-Kernel linear_logp {what} under context parallelism ('context parallel logprob redistribution is not "
            f"supported', {RLK_RUNTIME} _linear_logp_runtime_blocker): --context-parallel-size "
            f"{flags.get('context-parallel-size', 1)}; give the stage context-parallel 1 in the site file",
        )
    if flags.get("use-rollout-entropy") or flags.get("entropy-coef", 0.0) not in (0, 0.0, None):
        flag = "use-rollout-entropy" if flags.get("use-rollout-entropy") else "entropy-coef"
        return Finding(flag, f"RL-Kernel linear_logp {what} when the entropy is requested ('entropy is requested', {RLK_RUNTIME}): --{flag} is set")
    return None


@rule(backends=CLUSTER)
def model_fits_the_stage(flags, spec, knobs):
    """The model's training state and rollout weights against the stage's GPUs (harness/spec/capacity.py)."""
    from harness.spec.capacity import shortfalls
    from harness.spec.cluster import site_stage_hardware
    from harness.spec.rules import actor_gpus

    hardware, node = site_stage_hardware(knobs, spec.stage)
    if node.gpu_memory_gib is None:
        return None
    return [
        Finding(flag, f"stage {spec.stage} on {hardware} cannot hold the model: {why}")
        for flag, why in shortfalls(flags, node.gpu_memory_gib, actor_gpus(flags))
    ]


# --------------------------------------------------------------- mitigation flags, on every backend
# The embedded trainer takes the same flags (harness/embedded/flags.py) and refuses the same values.


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@rule(backends=ALL_BACKENDS)
def tis_clip_in_range(flags, spec, knobs):
    """TIS clamps exp(old - rollout) to [tis-clip-low, tis-clip] (VIME's vanilla_tis_function)."""
    if not flags.get("use-tis"):
        return None
    clip, low = _number(flags.get("tis-clip", 2.0)), _number(flags.get("tis-clip-low", 0.0))
    if clip is None or clip <= 0:
        return Finding(
            "tis-clip",
            f"--tis-clip {flags.get('tis-clip')!r}: must be a number > 0 with --use-tis (the TIS weight exp(old - rollout) "
            f"is clamped to at most tis-clip; VIME's default is 2.0)",
        )
    if low is None or not 0 <= low < clip:
        return Finding("tis-clip-low", f"--tis-clip-low {flags.get('tis-clip-low')!r}: must be >= 0 and below --tis-clip {clip}")
    return None


def _embedded_experts(checkpoint) -> int | None:
    """Experts of the embedded model a --hf-checkpoint names (None: cannot tell before the run)."""
    import json
    from pathlib import Path

    from harness.recipes import MODEL_RECIPES, URI_PREFIX

    if not isinstance(checkpoint, str):
        return None
    if checkpoint.startswith(URI_PREFIX + "model/"):
        recipe = MODEL_RECIPES.get(checkpoint.removeprefix(URI_PREFIX + "model/"))
        return None if recipe is None else recipe.num_experts
    config = Path(checkpoint) / "config.json"
    return (json.loads(config.read_text()).get("num_experts") or 0) if config.is_file() else None


@rule(backends=ALL_BACKENDS)
def routing_replay_needs_experts(flags, spec, knobs):
    """R3 replays routed experts: a dense model has none (VIME reads them from vLLM's routed_experts)."""
    if not flags.get("use-rollout-routing-replay"):
        return None
    if backends.backend(spec.backend).trainer_in_repo:
        experts = _embedded_experts(flags.get("hf-checkpoint"))
        if experts == 0:
            return Finding(
                "use-rollout-routing-replay",
                f"--use-rollout-routing-replay needs an MoE model; --hf-checkpoint {flags.get('hf-checkpoint')} is dense "
                "(the embedded MoE profile is embedded://model/qwen3-moe-tiny)",
            )
        if not flags.get("colocate"):
            return Finding(
                "use-rollout-routing-replay",
                "--use-rollout-routing-replay on the embedded backend needs --colocate: the routed experts are captured inside the "
                "in-process vLLM engine (harness/embedded/routed_capture.py)",
            )
        return None
    if not _number(flags.get("num-experts")):
        return Finding(
            "use-rollout-routing-replay", "--use-rollout-routing-replay needs an MoE model; the rendered flags set no --num-experts (a dense model)"
        )
    return None
