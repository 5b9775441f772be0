"""A small real trainer stand-in for launcher tests: accepts any VIME argv, prints VIME-format step
lines every 0.2 s (forever, or --num-rollout of them), and writes a pid file so a test can check
that the launcher stopped it. It tests the launcher, not VIME: nothing asserts on its numbers."""

import os
import sys
import time
from pathlib import Path

argv = sys.argv[1:]
if os.environ.get("PRINTING_TRAINER_REFUSE"):  # bad input: one error line, exit 2, as the embedded trainer does
    print("a start-up line", flush=True)
    print(f"error: {os.environ['PRINTING_TRAINER_REFUSE']}", flush=True)
    sys.exit(2)
steps = int(argv[argv.index("--num-rollout") + 1]) if "--num-rollout" in argv else 10**9
if "--embedded-output-dir" in argv:
    Path(argv[argv.index("--embedded-output-dir") + 1], "trainer.pid").write_text(str(os.getpid()))
# A trainer that exits 0 before its last rollout (a VIME run ends with no end line either way).
steps = min(steps, int(os.environ.get("PRINTING_TRAINER_STOP_AFTER", steps)))
for n in range(steps):
    print(f"[2026-11-29 12:00:00] train.py:1 - step {n}: {{'train/train_rollout_logprob_abs_diff': 0.01, 'train/loss': 0.5}}", flush=True)
    print(f"[2026-11-29 12:00:00] train.py:2 - rollout {n}: {{'rollout/raw_reward': 0.3}}", flush=True)
    time.sleep(0.2)
if os.environ.get("PRINTING_TRAINER_FAIL"):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", flush=True)
    sys.exit(1)
