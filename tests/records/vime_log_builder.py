"""Build VIME driver output in the shapes docs/records.md describes, for property tests and the benchmark.

Each record is rendered as VIME prints it (`[ts] file.py:LINE - step N: {repr of the dict}`),
optionally wrapped the way Ray and a terminal wrap it: ANSI-coloured actor prefix, a dedup
suffix, noise lines from other actors in between.
"""

from __future__ import annotations

import math
import random

ANSI_CYAN, ANSI_RESET = "\x1b[36m", "\x1b[0m"
TRAINER = "MegatronTrainRayActor pid=3121"
ROLLOUT_MANAGER = "RolloutManager pid=2987"
LOGGED_AT = {"step": "model.py:540", "rollout": "data.py:277", "perf": "train_metric_utils.py:88", "eval": "eval.py:50"}


def render(kind: str, n: int, metrics: dict, *, source: str | None = TRAINER, ansi: bool = True, repeated: int | None = None, second: int = 0) -> str:
    prefix = ""
    if source:
        prefix = f"{ANSI_CYAN}({source}){ANSI_RESET} " if ansi else f"({source}) "
    suffix = f" [repeated {repeated}x across cluster]" if repeated else ""
    stamp = f"[2026-11-20 10:{(second // 60) % 60:02d}:{second % 60:02d}]"
    return f"{prefix}{stamp} {LOGGED_AT[kind]} - {kind} {n}: {metrics!r}{suffix}"


def step_metrics(n: int, rng: random.Random) -> dict:
    return {
        "train/loss": rng.uniform(-0.05, 0.05),
        "train/pg_loss": rng.uniform(-0.05, 0.05),
        "train/entropy_loss": rng.uniform(0.2, 0.6),
        "train/pg_clipfrac": rng.uniform(0, 0.01),
        "train/ppo_kl": rng.uniform(0, 1e-4),
        "train/train_rollout_logprob_abs_diff": rng.uniform(0.01, 0.03),
        "train/kl_loss": 0.0,
        "train/grad_norm": rng.uniform(0.1, 0.5),
        "train/step": n,
    }


def rollout_metrics(n: int, rng: random.Random) -> dict:
    logp = rng.uniform(-0.5, -0.2)
    return {
        "rollout/log_probs": logp,
        "rollout/rollout_log_probs": logp + rng.uniform(-0.01, 0.01),
        "rollout/raw_reward": rng.uniform(0, 1),
        "rollout/response_lengths": rng.uniform(200, 8192),
        "rollout/truncated": rng.uniform(0, 0.1),
        "rollout/step": n,
    }


def manager_perf(n: int, rng: random.Random) -> dict:
    return {
        "rollout/response_len/mean": rng.uniform(200, 8192),
        "perf/rollout_time": rng.uniform(30, 90),
        "perf/tokens_per_gpu_per_sec": rng.uniform(1000, 5000),
    }


def trainer_perf(n: int, rng: random.Random) -> dict:
    return {
        "perf/update_weights_time": rng.uniform(20, 40),
        "perf/log_probs_time": rng.uniform(5, 15),
        "perf/train_time": rng.uniform(20, 40),
        "perf/step_time": rng.uniform(80, 130),
    }


NOISE = [
    f"{ANSI_CYAN}(VLLMEngine pid=3350){ANSI_RESET} INFO 11-20 10:00:31 [metrics.py:120] KV cache usage: 41.2%",
    f"{ANSI_CYAN}(MegatronTrainRayActor pid=3122){ANSI_RESET} [2026-11-20 10:00:58] model.py:531 - rank 1 done [repeated 6x across cluster]",
    "[2026-11-20 10:00:02] arguments.py:1492 -   distributed_timeout_minutes ..................... 10",
]


def argument_lines(num_rollout: int, steps_per_rollout: int = 1, **more) -> list[str]:
    """The driver's argument print, as Megatron's _print_args writes it through VIME's logger."""
    values = {"distributed_timeout_minutes": 10, "num_rollout": num_rollout, "num_steps_per_rollout": steps_per_rollout, "rollout_top_p": 1.0, **more}
    values = dict(sorted(values.items()))
    at = "[2026-11-20 10:00:00] arguments.py:1492 - "
    return (
        [f"{at}------------------------ arguments ------------------------"]
        + [f"{at}  {name} {'.' * (48 - len(name))} {value}" for name, value in values.items()]
        + [f"{at}-------------------- end of arguments ---------------------"]
    )


def build_run_log(steps: int, seed: int = 0, nan_every: int = 0, noise_lines: int = 3, arguments: bool = True) -> tuple[list[str], list[tuple]]:
    """Lines of a run with `steps` rollouts (one train step each) and the records they hold, as
    (kind, n, metrics, source) in line order. Like VIME's, the log has no end line; with
    `arguments` it starts with the argument print that says num_rollout = `steps`."""
    rng = random.Random(seed)
    lines, expected = (argument_lines(steps) if arguments else []), []
    for n in range(steps):
        groups = [
            ("perf", manager_perf(n, rng), ROLLOUT_MANAGER),
            ("rollout", rollout_metrics(n, rng), TRAINER),
            ("step", step_metrics(n, rng), TRAINER),
            ("perf", trainer_perf(n, rng), TRAINER),
        ]
        if nan_every and n % nan_every == 0:
            groups[2][1]["train/loss"] = math.nan
            groups[2][1]["train/grad_norm"] = math.inf
        for kind, metrics, source in groups:
            lines.append(render(kind, n, metrics, source=source, second=n))
            expected.append((kind, n, metrics, source))
            lines.extend(rng.choice(NOISE) for _ in range(noise_lines))
    return lines, expected
