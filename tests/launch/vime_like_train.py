"""A stand-in for VIME's train.py, as a Ray job sees it, for launcher tests (standard library only:
the job runs it with the cluster's python3).

Like VIME: it prints its arguments at start in Megatron's block, then per rollout the trainer's
`step N: {...}` and `rollout N: {...}` lines with Ray actor prefixes, the rollout manager's
`perf N: {...}`, and ends without any end line (VIME's loop just returns). It also says where it
started (the job's working directory) and which site variables reached it, for the test to check.
STANDIN_STEP_S (from the site's env) sets the seconds per rollout; with STANDIN_HOLD_AT=k and
STANDIN_RELEASE=PATH it waits before rollout k until PATH exists (a test's way to keep the job
running for as long as it looks at it, on a machine too loaded to time it). With --use-tensorboard it writes
TensorBoard events as VIME's adapter does (add_scalar per key against train/step or rollout/step)
into --tensorboard-dir; with --use-wandb a W&B run (VIME's init_tracking / log / finish_tracking)
under --wandb-dir, in --wandb-mode; each where its package is importable (else it says so).
"""

import os
import sys
import time
from datetime import datetime


def parse(argv: list[str]) -> dict[str, str]:
    args, i = {}, 0
    while i < len(argv):
        name = argv[i].lstrip("-").replace("-", "_")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            args[name], i = argv[i + 1], i + 2
        else:
            args[name], i = "True", i + 1
    return args


def log(actor: str, message: str) -> None:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"({actor} pid={os.getpid()}) [{stamp}] train.py:1 - {message}", flush=True)


args = parse(sys.argv[1:])
print("------------------------ arguments ------------------------", flush=True)
for name in sorted(args):
    print(f"  {name} {'.' * max(2, 48 - len(name))} {args[name]}", flush=True)
print("-------------------- end of arguments ---------------------", flush=True)
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
if args.get("use_tensorboard") == "True":
    try:
        events = Events(args.get("tensorboard_dir") or os.environ.get("TENSORBOARD_DIR", "tensorboard"))
    except ImportError as err:
        print(f"TensorBoard: not written ({err})", flush=True)
wandb_run = None
if args.get("use_wandb") == "True":
    try:
        import wandb

        mode = args.get("wandb_mode") or os.environ.get("WANDB_MODE", "offline")
        wandb_run = wandb.init(
            project=args.get("wandb_project"), dir=args.get("wandb_dir"), mode=mode, config={"num_rollout": args.get("num_rollout")}
        )
    except ImportError as err:
        print(f"W&B: not logged ({err})", flush=True)
step_s = float(os.environ.get("STANDIN_STEP_S", "0.5"))
hold_at, release = int(os.environ.get("STANDIN_HOLD_AT", "-1")), os.environ.get("STANDIN_RELEASE", "")
for n in range(int(args.get("num_rollout", "3"))):
    if n == hold_at:
        deadline = time.time() + 300
        while not os.path.exists(release) and time.time() < deadline:
            time.sleep(0.1)
    time.sleep(step_s)
    rollout = {"rollout/raw_reward": 0.3, "rollout/response_len/mean": 12.0}
    train = {"train/train_rollout_logprob_abs_diff": 0.0123, "train/loss": 0.5}
    log("RolloutManager", f"perf {n}: {{'perf/rollout_time': {step_s / 2}}}")
    log("MegatronTrainRayActor", f"rollout {n}: {rollout}")
    log("MegatronTrainRayActor", f"step {n}: { ({**train, 'train/step': n}) }")
    if events is not None:
        events.add(rollout, n)
        events.add(train, n)
    if wandb_run is not None:
        wandb_run.log({**rollout, "rollout/step": n})
        wandb_run.log({**train, "train/step": n})
if wandb_run is not None:
    wandb_run.finish()
