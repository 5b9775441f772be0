"""VIME's flag language as the embedded trainer understands it.

Every flag the knobs can render is listed here with what the miniature does with it: honoured
(it changes the run) or accepted but not honoured (with the reason, written to the run record),
so one rendered argv serves both backends and every difference is visible. Unknown flags are
typos: one error line naming the flag and the closest known one, exit code 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    name: str
    kind: Callable[[str], Any] | None  # None: a bare switch
    default: Any = None
    honoured: bool = True
    why: str = ""  # for flags not honoured: the reason; for honoured ones: a note
    choices: tuple = ()


def _int(v: str) -> int:
    return int(v)


def _float(v: str) -> float:
    return float(v)


_NOT_AT_SCALE = "no meaning at this scale (one CPU process / tiny model)"
_H = True
_N = False

FLAGS: list[Flag] = [
    # --- model and data
    Flag("hf-checkpoint", str, None),
    Flag("ref-load", str, None, _N, "no reference model: the KL loss is off (VIME default)"),
    Flag("load", str, None, _N, "no Megatron checkpoint resume; weights come from --hf-checkpoint"),
    Flag("prompt-data", str, None),
    Flag("apply-chat-template", None, False),
    Flag("input-key", str, "input"),
    Flag("label-key", str, None),
    Flag("rm-type", str, "deepscaler", choices=("deepscaler",)),
    # --- algorithm
    Flag("train-backend", str, "megatron", choices=("megatron",)),
    Flag("advantage-estimator", str, "grpo", choices=("grpo",)),
    Flag("disable-grpo-std-normalization", None, False),
    Flag("num-rollout", _int, None),
    Flag("rollout-batch-size", _int, None),
    Flag("n-samples-per-prompt", _int, 1),
    Flag("global-batch-size", _int, None),
    Flag("num-steps-per-rollout", _int, None),
    Flag("micro-batch-size", _int, 1, _N, "micro-batches are formed from --max-tokens-per-gpu"),
    Flag("rollout-max-response-len", _int, 1024),
    Flag("rollout-temperature", _float, 1.0),
    Flag("rollout-top-p", _float, 1.0),
    Flag("rollout-top-k", _int, -1),
    Flag("rollout-seed", _int, 42, _N, "the engine is seeded from --seed"),
    Flag("balance-data", None, False, _N, "one data-parallel rank: nothing to balance"),
    Flag("bf16", None, False),
    Flag("lr", _float, 1e-4),
    Flag("weight-decay", _float, 0.0),
    Flag("adam-beta1", _float, 0.9),
    Flag("adam-beta2", _float, 0.98),
    Flag("clip-grad", _float, 1.0),
    Flag("eps-clip", _float, 0.2),
    Flag("eps-clip-high", _float, None),
    Flag("entropy-coef", _float, 0.0),
    Flag("use-kl-loss", None, False, _N, "no reference model in the miniature"),
    Flag("kl-loss-coef", _float, 0.0, _N, "no reference model in the miniature"),
    Flag("calculate-per-token-loss", None, False),
    Flag("use-tis", None, False),
    Flag("tis-clip", _float, 2.0),
    Flag("tis-clip-low", _float, 0.0),
    Flag("use-rollout-routing-replay", None, False, _H, "R3, MoE only: vLLM returns each token's routed experts, Megatron's routers replay them"),
    Flag("seed", _int, 1234),
    Flag("save-debug-rollout-data", str, None),
    Flag("save-debug-train-data", str, None),
    # --- Megatron parallelism
    Flag("num-experts", _int, None, _H, "checked against the checkpoint's expert count"),
    Flag("tensor-model-parallel-size", _int, 1, choices=(1, 2)),
    Flag("pipeline-model-parallel-size", _int, 1, choices=(1,)),
    Flag("context-parallel-size", _int, 1, _N, "context parallelism is not built: whole sequences per process"),
    Flag("expert-model-parallel-size", _int, 1, _N, "experts are not split across processes here"),
    Flag("expert-tensor-parallel-size", _int, 1, _N, "experts are not split across processes here"),
    Flag("sequence-parallel", None, False, _N, "the local layer spec's torch norm rejects it on CPU"),
    Flag("use-dynamic-batch-size", None, False),
    Flag("max-tokens-per-gpu", _int, None),
    Flag("recompute-granularity", str, None, _N, "activation recompute saves GPU memory only"),
    Flag("recompute-method", str, None, _N, "activation recompute saves GPU memory only"),
    Flag("recompute-num-layers", _int, None, _N, "activation recompute saves GPU memory only"),
    Flag("attention-dropout", _float, 0.0, _H, "only 0.0 is accepted (log-prob replay needs it)", (0.0,)),
    Flag("hidden-dropout", _float, 0.0, _H, "only 0.0 is accepted (log-prob replay needs it)", (0.0,)),
    Flag("attention-softmax-in-fp32", None, False, _H, "Megatron's local attention always softmaxes in fp32"),
    Flag("attention-backend", str, None, _N, "the CPU uses Megatron's local (unfused) attention"),
    # --- placement
    Flag("actor-num-nodes", _int, 1, _N, _NOT_AT_SCALE),
    Flag("actor-num-gpus-per-node", _int, 1, _N, _NOT_AT_SCALE + "; TP processes come from TP size"),
    Flag("rollout-num-gpus", _int, None, _N, _NOT_AT_SCALE + "; one vLLM engine"),
    Flag("rollout-num-gpus-per-engine", _int, 1, _N, "one CPU vLLM engine without engine TP"),
    Flag("colocate", None, False),
    # --- vLLM pass-through
    Flag("vllm-dtype", str, "auto", choices=("auto", "float32", "bfloat16")),
    Flag("vllm-quantization", str, None, _H, "fp8 is emulated on CPU (see the record's emulation notes)", ("fp8",)),
    Flag("vllm-logprobs-mode", str, "processed_logprobs", choices=("raw_logprobs", "processed_logprobs")),
    Flag("vllm-gpu-memory-utilization", _float, None, _N, "on CPU this would reserve host memory; the KV cache is sized explicitly instead"),
    Flag("vllm-router-policy", str, None, _N, "one engine: no router"),
    Flag("vllm-enable-expert-parallel", None, False, _N, "one engine process: no expert parallelism"),
    Flag("vllm-all2all-backend", str, None, _N, "expert all-to-all needs several GPUs"),
    Flag("vllm-enable-deterministic-inference", None, False, _N, "CPU kernels are batch-invariant enough"),
    # --- tracking (VIME's init_tracking / log): outputs only, the run's numbers do not change
    Flag("use-wandb", None, False, _H, "logs each dict to W&B as VIME's log() does; offline unless --wandb-mode/WANDB_MODE say otherwise"),
    Flag("wandb-project", str, None),
    Flag("wandb-group", str, None),
    Flag("wandb-mode", str, None, choices=("online", "offline", "disabled")),
    Flag("wandb-dir", str, None, _H, "default: the run's output directory (its wandb/ folder)"),
    Flag("use-tensorboard", None, False, _H, "add_scalar per key against train/step or rollout/step, as VIME's TensorBoard adapter"),
    Flag("tensorboard-dir", str, None, _H, "default: TENSORBOARD_DIR, else <output dir>/tensorboard"),
    # --- embedded-only
    Flag("embedded-inject", str, None),
    Flag("embedded-replay-processed-logprobs", None, False),
    Flag("embedded-logprob-operator", str, "native", _H, "the selected-log-prob operator of both engines (harness/embedded/logprob_operator.py)"),
    Flag(
        "embedded-linear-operator",
        str,
        "native",
        _H,
        "the linear operator of both engines at the fp8-weights boundary (harness/embedded/linear_operator.py)",
    ),
    Flag("embedded-true-on-policy", None, False, _H, "trainer log-probs bitwise equal to the engine's (docs/true-on-policy.md)"),
    Flag("embedded-true-on-policy-without", str, None, _H, "levers switched off, comma-separated (controls; docs/true-on-policy.md)"),
    Flag("embedded-levers", str, None, _H, "lever switches on, comma-separated: one boundary aligned, the rest native (docs/attribution.md)"),
    Flag("embedded-output-dir", str, None),
    Flag("embedded-probe-samples", _int, 2),
]
BY_NAME = {f.name: f for f in FLAGS}


class FlagError(ValueError):
    """A bad argv: the message is the one line the user sees."""


def parse(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(every flag's value, names given on the command line)."""
    values = {f.name: f.default for f in FLAGS}
    given: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise FlagError(f"unexpected argument {token!r}: flags look like --name [value]")
        name = token[2:]
        flag = BY_NAME.get(name)
        if flag is None:
            close = difflib.get_close_matches(name, BY_NAME, n=1)
            hint = f"; did you mean --{close[0]}?" if close else ""
            raise FlagError(f"unknown flag --{name}{hint}")
        if flag.kind is None:
            values[name] = True
            i += 1
        else:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise FlagError(f"--{name} needs a value")
            raw = argv[i + 1]
            try:
                value = flag.kind(raw)
            except ValueError:
                raise FlagError(f"--{name} {raw}: expected {flag.kind.__name__.strip('_')}") from None
            if flag.choices and value not in flag.choices:
                raise FlagError(f"--{name} {raw}: the embedded trainer supports {list(flag.choices)}")
            values[name] = value
            i += 2
        given.append(name)
    return values, given


def not_honoured(given: list[str], values: dict[str, Any]) -> list[dict]:
    return [{"flag": n, "value": values[n], "reason": BY_NAME[n].why} for n in given if not BY_NAME[n].honoured]
