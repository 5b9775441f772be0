"""A stand-in for VIME's train.py, as a Ray job (or a shell) sees it, for launcher and records tests
(standard library only: the job runs it with the cluster's python3). Its numbers are made up; its
lines are VIME's, in the formats VIME writes them (RL-Align/vime, commits as read):

- the driver's argument print, Megatron's `_print_args` (`  name ....... value`, dots to 48
  columns, sorted case-insensitively, values as Python prints them), after VIME's own start-up
  rules ran: bf16 forced on unless fp16 (vime/backends/megatron_utils/arguments.py
  `_set_default_megatron_args`), the colocated rollout on the trainer's GPUs and offloading on
  (vime/utils/arguments.py@e972c37 `vime_validate_args`), RL-Kernel's resolved mode
  (`resolve_rlk_mode_config`: rlk_fast, rlk_consistency, rl_kernel_ops as a tuple, rlk_mode_config);
- per rollout, behind Ray's actor prefixes and VIME's logging prefix: the rollout manager's
  `perf N: {...}` (rollout time, tokens per GPU per second), the trainer's `rollout N: {...}`,
  `step N: {...}` (with RL-Kernel's train/rl_kernel_* counters when it is on: model.py@0cd0135) and
  its `perf N: {...}` (vime/utils/train_metric_utils.py@8f1ccf6 `log_perf_data_raw`: *_time,
  step_time = train_wait_time + train_time, wait_time_ratio, actor_train_tok_per_s), a
  `[Rank 0] Memory-Usage ...: {...}` line (vime/utils/memory_utils.py `print_memory`) and vLLM's
  engine statistics line with its KV-cache usage (vllm/v1/metrics/loggers.py);
- with --enable-rl-kernel and --rl-kernel-ops linear_logp: `Using RL-Kernel linear_logp op:
  FusedLinearLogpSM90Op` once, and each step's `RL-Kernel linear_logp runtime_metadata: ...` line
  (vime/backends/megatron_utils/rl_kernel.py@0cd0135); with STANDIN_RLK_FALLBACK=REASON the operator
  falls back instead (`Falling back to vime logprob path because RL-Kernel linear_logp is
  unavailable: REASON`, fallback counters at 1);
- no end line (VIME's loop just returns).
It also says where it started (the job's working directory) and which site variables reached it.
STANDIN_STEP_S (from the site's env) sets the seconds per rollout; with STANDIN_HOLD_AT=k and
STANDIN_RELEASE=PATH it waits before rollout k until PATH exists (a test's way to keep the job
running for as long as it looks at it, on a machine too loaded to time it). With --use-tensorboard it writes
TensorBoard events as VIME's adapter does (add_scalar per key against train/step or rollout/step)
into --tensorboard-dir; with --use-wandb a W&B run (VIME's init_tracking / log / finish_tracking)
under --wandb-dir, in --wandb-mode; each where its package is importable (else it says so).
"""

import os
import random
import sys
import time
from datetime import datetime


def parse(argv: list[str]) -> dict[str, object]:
    """argv -> dest -> value, as argparse would type them: numbers as numbers, a switch as True,
    several values as a list."""
    args, i = {}, 0
    while i < len(argv):
        name = argv[i].lstrip("-").replace("-", "_")
        values = []
        while i + 1 + len(values) < len(argv) and not argv[i + 1 + len(values)].startswith("--"):
            values.append(typed(argv[i + 1 + len(values)]))
        args[name] = True if not values else values[0] if len(values) == 1 else values
        i += 1 + len(values)
    return args


def typed(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def log(actor: str, message: str) -> None:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"({actor} pid={os.getpid()}) [{stamp}] train.py:1 - {message}", flush=True)


def vime_defaults(args: dict) -> dict:
    """What VIME's start-up rules add or change before Megatron prints the arguments."""
    out = dict(args)
    out["bf16"] = not out.get("fp16", False)
    out.setdefault("fp16", False)
    nodes, per_node = int(out.get("actor_num_nodes", 1)), int(out.get("actor_num_gpus_per_node", 8))
    out["world_size"], out["rank"] = nodes * per_node, 0
    if out.get("colocate"):
        out["rollout_num_gpus"] = nodes * per_node
        out["offload_train"] = out["offload_rollout"] = True
        out["num_gpus_per_node"] = per_node
    ops = tuple(op.strip() for op in str(out.get("rl_kernel_ops", "")).split(",") if op.strip())
    fast = "strict" if out.get("rl_kernel_strict") else "auto" if out.get("enable_rl_kernel") else "off"
    out.update(rlk_fast=fast, rlk_consistency="off", rl_kernel_ops=ops, enable_rl_kernel=bool(out.get("enable_rl_kernel")))
    out["rlk_mode_config"] = f"RlkModeConfig(fast={fast!r}, consistency='off', ops={ops!r})"
    out.setdefault("start_rollout_id", 0)
    return out


def print_arguments(args: dict) -> None:
    print("------------------------ arguments ------------------------", flush=True)
    lines = [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in args.items()]
    for line in sorted(lines, key=lambda x: x.lower()):
        print(line, flush=True)
    print("-------------------- end of arguments ---------------------", flush=True)


args = vime_defaults(parse(sys.argv[1:]))
print_arguments(args)
print(f"working directory: {os.getcwd()}", flush=True)
for name in ("STANDIN_MARK", "LAB_SITE_NAME", "LAB_PRIVATE"):
    print(f"variable {name}={os.environ.get(name, '(not set)')}", flush=True)


class Events:
    """TensorBoard scalars through tensorboard's own event writer (no torch needed)."""

    def __init__(self, directory):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary, self._writer = Event, Summary, EventFileWriter(directory)

    def add(self, metrics: dict, step: int) -> None:
        values = [self._summary.Value(tag=tag, simple_value=value) for tag, value in metrics.items()]
        self._writer.add_event(self._event(wall_time=time.time(), step=step, summary=self._summary(value=values)))
        self._writer.flush()


events = None
if args.get("use_tensorboard") is True:
    try:
        events = Events(args.get("tensorboard_dir") or os.environ.get("TENSORBOARD_DIR", "tensorboard"))
    except ImportError as err:
        print(f"TensorBoard: not written ({err})", flush=True)
wandb_run = None
if args.get("use_wandb") is True:
    try:
        import wandb

        mode = args.get("wandb_mode") or os.environ.get("WANDB_MODE", "offline")
        wandb_run = wandb.init(
            project=args.get("wandb_project"), dir=args.get("wandb_dir"), mode=mode, config={"num_rollout": args.get("num_rollout")}
        )
    except ImportError as err:
        print(f"W&B: not logged ({err})", flush=True)

TRAINER, MANAGER, ENGINE = "MegatronTrainRayActor", "RolloutManager", "VLLMEngine"
linear_logp = args["enable_rl_kernel"] and "linear_logp" in args["rl_kernel_ops"]
fallback_reason = os.environ.get("STANDIN_RLK_FALLBACK", "")
if linear_logp and not fallback_reason:
    log(TRAINER, "Using RL-Kernel linear_logp op: FusedLinearLogpSM90Op")
elif linear_logp:
    log(TRAINER, f"Falling back to vime logprob path because RL-Kernel linear_logp is unavailable: {fallback_reason}")
# The same seed gives both sides of an A/B the same step-to-step noise, as the same prompts would;
# each side adds a little of its own (two runs are never equal step for step).
noise = random.Random(int(args.get("seed", 1234)))
own = random.Random(f"{args.get('seed', 1234)} {linear_logp} {os.environ.get('STANDIN_RLK_FALLBACK', '')}")
step_s = float(os.environ.get("STANDIN_STEP_S", "0.5"))
hold_at, release = int(os.environ.get("STANDIN_HOLD_AT", "-1")), os.environ.get("STANDIN_RELEASE", "")
samples = int(args.get("rollout_batch_size", 32)) * int(args.get("n_samples_per_prompt", 8))
steps_per_rollout = max(1, samples // int(args.get("global_batch_size", samples)))
ran_linear_logp = linear_logp and not fallback_reason
calls = fallbacks = 0
for n in range(int(args.get("num_rollout", 3))):
    if n == hold_at:
        deadline = time.time() + 300
        while not os.path.exists(release) and time.time() < deadline:
            time.sleep(0.1)
    time.sleep(step_s)
    jitter = noise.gauss(0.0, 1.0) + 0.3 * own.gauss(0.0, 1.0)
    response_len = 1200.0 + 80.0 * jitter
    rollout_time = 60.0 + 4.0 * jitter
    log(
        ENGINE,
        f"INFO 11-20 10:00:31 [loggers.py:257] Engine 000: Avg prompt throughput: {900.0 + 40 * jitter:.1f} tokens/s, "
        f"Avg generation throughput: {5200.0 + 200 * jitter:.1f} tokens/s, Running: 32 reqs, Waiting: 0 reqs, "
        f"GPU KV cache usage: {41.0 + 3 * jitter:.1f}%, Prefix cache hit rate: 0.0%",
    )
    manager = {
        "rollout/response_len/mean": response_len,
        "perf/rollout_time": rollout_time,
        "perf/tokens_per_gpu_per_sec": samples * response_len / rollout_time / 8,
    }
    log(MANAGER, f"perf {n}: {manager}")
    rollout = {
        "rollout/raw_reward": 0.3 + 0.02 * noise.gauss(0.0, 1.0) + 0.005 * own.gauss(0.0, 1.0),
        "rollout/response_len/mean": response_len,
        "rollout/step": n,
    }
    log(TRAINER, f"rollout {n}: {rollout}")
    for k in range(steps_per_rollout):
        step = n * steps_per_rollout + k
        abs_diff = (0.0135 if ran_linear_logp else 0.0113) + 0.0005 * noise.gauss(0.0, 1.0) + 0.0002 * own.gauss(0.0, 1.0)
        train = {"train/train_rollout_logprob_abs_diff": abs_diff, "train/loss": 0.5, "train/pg_clipfrac": 0.001}
        if linear_logp:
            calls += 0 if fallback_reason else 2
            fallbacks += 1 if fallback_reason else 0
            train.update(
                {
                    "train/rl_kernel_linear_logp_call_count_total": float(calls),
                    "train/rl_kernel_linear_logp_call_count_delta": 0.0 if fallback_reason else 2.0,
                    "train/rl_kernel_linear_logp_fallback_count_total": float(fallbacks),
                    "train/rl_kernel_linear_logp_fallback_count_delta": 1.0 if fallback_reason else 0.0,
                    "train/rl_kernel_linear_logp_fallback": 1.0 if fallback_reason else 0.0,
                }
            )
            actual = "vime.native.linear_logp" if fallback_reason else "FusedLinearLogpSM90Op"
            log(
                TRAINER,
                f"RL-Kernel linear_logp runtime_metadata: requested_backend=auto actual_backend={actual} backend_id={actual} "
                f"contract_id=None fallback={bool(fallback_reason)} fallback_reason={fallback_reason or None} memory_probe_enabled=False",
            )
        log(TRAINER, f"step {step}: { ({**train, 'train/step': step}) }")
        if events is not None:
            events.add(train, step)
        if wandb_run is not None:
            wandb_run.log({**train, "train/step": step})
    speedup = 0.8 if ran_linear_logp else 1.0
    log_probs_time, actor_train_time = 12.0 * speedup + 0.5 * jitter, 34.0 * (0.95 if ran_linear_logp else 1.0) + jitter
    train_time, wait = actor_train_time + log_probs_time + 35.0, rollout_time + 2.0
    trainer = {
        "perf/update_weights_time": 35.0 + jitter,
        "perf/log_probs_time": log_probs_time,
        "perf/actor_train_time": actor_train_time,
        "perf/actor_train_tok_per_s": samples * (response_len + 300) / actor_train_time,
        "perf/train_wait_time": wait,
        "perf/train_time": train_time,
        "perf/step_time": wait + train_time,
        "perf/wait_time_ratio": wait / (wait + train_time),
    }
    used = (60.0 if ran_linear_logp else 64.0) + noise.uniform(0.0, 1.0)
    memory = {"gpu": "0", "total_GB": 184.0, "free_GB": 184.0 - used, "used_GB": used, "allocated_GB": used - 6.0, "reserved_GB": used - 2.0}
    log(TRAINER, f"[Rank 0] Memory-Usage after train: {memory}")
    log(TRAINER, f"perf {n}: {trainer}")
    if events is not None:
        events.add(rollout, n)
    if wandb_run is not None:
        wandb_run.log({**rollout, "rollout/step": n})
if wandb_run is not None:
    wandb_run.finish()
