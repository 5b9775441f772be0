"""The parsed flags as one typed object, validated the way VIME validates them."""

from __future__ import annotations

from dataclasses import dataclass

from harness.embedded import injections
from harness.embedded.flags import FlagError


@dataclass(frozen=True, kw_only=True)
class Settings:
    hf_checkpoint: str
    prompt_data: str
    input_key: str
    label_key: str | None
    apply_chat_template: bool
    num_rollout: int
    rollout_batch_size: int
    n_samples: int
    global_batch_size: int
    max_response_len: int
    temperature: float
    top_p: float
    top_k: int
    bf16: bool
    vllm_dtype: str
    fp8: bool
    logprobs_mode: str
    colocate: bool
    tp: int
    seed: int
    lr: float
    betas: tuple[float, float]
    weight_decay: float
    clip_grad: float
    eps_clip: float
    eps_clip_high: float
    use_tis: bool
    tis_clip: float
    tis_clip_low: float
    routing_replay: bool  # --use-rollout-routing-replay (R3)
    per_token_loss: bool
    std_normalise: bool
    max_tokens_per_micro_batch: int
    num_experts: int | None
    save_rollout: str | None
    save_train: str | None
    replay_processed: bool
    logprob_operator: str = "native"  # --embedded-logprob-operator (harness.embedded.logprob_operator)
    linear_operator: str = "native"  # --embedded-linear-operator (harness.embedded.linear_operator)
    true_on_policy: bool  # --embedded-true-on-policy (harness.embedded.true_on_policy)
    true_on_policy_without: frozenset[str]  # --embedded-true-on-policy-without: levers switched off
    levers: frozenset[str] = frozenset()  # every lever switch on: the true-on-policy set less its without, plus --embedded-levers
    output_dir: str | None
    probe_samples: int
    faults: injections.Injections

    @property
    def steps_per_rollout(self) -> int:
        return self.rollout_batch_size * self.n_samples // self.global_batch_size


def _true_on_policy_without(v: dict) -> frozenset[str]:
    from harness.embedded.true_on_policy import expand

    names = frozenset(n.strip() for n in (v["embedded-true-on-policy-without"] or "").split(",") if n.strip())
    if names and not v["embedded-true-on-policy"]:
        raise FlagError("--embedded-true-on-policy-without needs --embedded-true-on-policy")
    try:
        return expand(names)
    except ValueError as err:
        raise FlagError(f"--embedded-true-on-policy-without: {err}") from None


def _levers(v: dict) -> frozenset[str]:
    """Every switch the flags turn on (harness.embedded.true_on_policy.switches_on)."""
    from harness.embedded.true_on_policy import IN_PROCESS_ENGINE, switches_on

    names = [n.strip() for n in (v["embedded-levers"] or "").split(",") if n.strip()]
    try:
        on = switches_on(true_on_policy=v["embedded-true-on-policy"], without=_true_on_policy_without(v), levers=names)
    except ValueError as err:
        raise FlagError(f"--embedded-levers: {err}") from None
    needs_engine_here = sorted(on & set(IN_PROCESS_ENGINE))
    if needs_engine_here and not (v["colocate"] and v["tensor-model-parallel-size"] == 1):
        raise FlagError(f"--embedded-levers {needs_engine_here[0]}: needs vLLM's sampler in the trainer's process (--colocate, TP=1)")
    return on


def from_flags(v: dict) -> Settings:
    for required in ("hf-checkpoint", "prompt-data", "num-rollout", "rollout-batch-size"):
        if v[required] is None:
            raise FlagError(f"--{required} is required")
    samples = v["rollout-batch-size"] * v["n-samples-per-prompt"]
    gbs = v["global-batch-size"] or samples
    if v["num-steps-per-rollout"]:
        gbs = samples // v["num-steps-per-rollout"]
    if gbs <= 0 or samples % gbs:
        raise FlagError(f"--global-batch-size {gbs} must divide rollout-batch-size x n-samples-per-prompt = {samples}")
    if v["use-tis"] and v["tis-clip"] <= 0:
        raise FlagError(f"--tis-clip {v['tis-clip']}: must be > 0 with --use-tis (the TIS weight is clamped to [tis-clip-low, tis-clip])")
    if v["use-tis"] and not 0 <= v["tis-clip-low"] < v["tis-clip"]:
        raise FlagError(f"--tis-clip-low {v['tis-clip-low']}: must be >= 0 and below --tis-clip {v['tis-clip']}")
    if v["entropy-coef"]:
        raise FlagError("--entropy-coef: the embedded trainer supports only 0 (no entropy bonus)")
    if v["embedded-probe-samples"] < 0:
        raise FlagError("--embedded-probe-samples must be >= 0")
    _check_logprob_operator(v)
    _check_linear_operator(v)
    dynamic = v["use-dynamic-batch-size"]
    if dynamic and not v["max-tokens-per-gpu"]:
        raise FlagError("--use-dynamic-batch-size requires --max-tokens-per-gpu (as in VIME)")
    return Settings(
        hf_checkpoint=v["hf-checkpoint"],
        prompt_data=v["prompt-data"],
        input_key=v["input-key"],
        label_key=v["label-key"],
        apply_chat_template=v["apply-chat-template"],
        num_rollout=v["num-rollout"],
        rollout_batch_size=v["rollout-batch-size"],
        n_samples=v["n-samples-per-prompt"],
        global_batch_size=gbs,
        max_response_len=v["rollout-max-response-len"],
        temperature=v["rollout-temperature"],
        top_p=v["rollout-top-p"],
        top_k=v["rollout-top-k"],
        bf16=v["bf16"],
        vllm_dtype=v["vllm-dtype"],
        fp8=v["vllm-quantization"] == "fp8",
        logprobs_mode=v["vllm-logprobs-mode"],
        colocate=v["colocate"],
        tp=v["tensor-model-parallel-size"],
        seed=v["seed"],
        lr=v["lr"],
        betas=(v["adam-beta1"], v["adam-beta2"]),
        weight_decay=v["weight-decay"],
        clip_grad=v["clip-grad"],
        eps_clip=v["eps-clip"],
        eps_clip_high=v["eps-clip-high"] or v["eps-clip"],
        use_tis=v["use-tis"],
        tis_clip=v["tis-clip"],
        tis_clip_low=v["tis-clip-low"],
        routing_replay=v["use-rollout-routing-replay"],
        per_token_loss=v["calculate-per-token-loss"],
        std_normalise=not v["disable-grpo-std-normalization"],
        # Without dynamic batching VIME packs --micro-batch-size samples; here one micro-batch
        # of at most this many padded tokens either way (the default holds a P0 step at once).
        max_tokens_per_micro_batch=v["max-tokens-per-gpu"] or 4096,
        num_experts=v["num-experts"],
        save_rollout=v["save-debug-rollout-data"],
        save_train=v["save-debug-train-data"],
        replay_processed=v["embedded-replay-processed-logprobs"],
        logprob_operator=v["embedded-logprob-operator"],
        linear_operator=v["embedded-linear-operator"],
        true_on_policy=v["embedded-true-on-policy"],
        true_on_policy_without=_true_on_policy_without(v),
        levers=_levers(v),
        output_dir=v["embedded-output-dir"],
        probe_samples=v["embedded-probe-samples"],
        faults=injections.parse(v["embedded-inject"]),
    )


def _check_logprob_operator(v: dict) -> None:
    from harness.embedded.logprob_operator import NATIVE, OperatorChoiceError, resolve

    name = v["embedded-logprob-operator"]
    try:
        resolve(name)
    except OperatorChoiceError as err:
        raise FlagError(str(err)) from None
    for other in ("embedded-replay-processed-logprobs", "embedded-true-on-policy"):
        if name != NATIVE and v.get(other):
            raise FlagError(f"--embedded-logprob-operator {name} with --{other}: each replaces the trainer's log-prob path; choose one")


# Lever switches that replace the kernel of the same linear layers the linear operator computes.
_LINEAR_LEVERS = ("trainer-fp8-weights", "trainer-engine-qkv-gemm", "trainer-engine-o-proj-gemm", "trainer-engine-mlp")


def _check_linear_operator(v: dict) -> None:
    from harness.embedded.linear_operator import NATIVE, LinearOperatorChoiceError, resolve

    name = v["embedded-linear-operator"]
    try:
        resolve(name)
    except LinearOperatorChoiceError as err:
        raise FlagError(str(err)) from None
    if name == NATIVE:
        return
    clash = sorted(set(_levers(v)) & set(_LINEAR_LEVERS))
    if clash:
        raise FlagError(f"--embedded-linear-operator {name} with the lever {clash[0]}: each replaces the trainer's linear kernel; choose one")
    if v["tensor-model-parallel-size"] != 1 or not v["colocate"]:
        raise FlagError(
            f"--embedded-linear-operator {name}: supported with --colocate and TP=1 (the engine's linears are wrapped in the trainer's process)"
        )
