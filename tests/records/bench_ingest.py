"""Benchmark (not a test): ingest 100 steps of VIME log plus 10 M dumped tokens.

    .venv/bin/python tests/records/bench_ingest.py [--steps 100] [--tokens 10000000]

Builds the input in a temp dir (a real-format driver log from vime_log_builder, and one
`--save-debug-rollout-data` dump per rollout, samples as VIME saves them: python lists), then
times `ingest(dir, out)` end to end: parse, torch.load of every dump, summaries, run directory
written. Prints one JSON line with the timings and the machine. Results go in docs/records.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from vime_log_builder import build_run_log  # noqa: E402

from harness.records.environment import cpu_and_memory  # noqa: E402
from harness.records.ingest import ingest  # noqa: E402


def write_dumps(directory: Path, rollouts: int, tokens_total: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    per_rollout = tokens_total // rollouts
    written = 0
    for rollout_id in range(rollouts):
        samples, used = [], 0
        while used < per_rollout:
            prompt = 256
            response = min(rng.randint(200, 3000), max(per_rollout - used - prompt, 1))
            samples.append(
                {
                    "tokens": [rng.randrange(151_000)] * (prompt + response),
                    "response_length": response,
                    "reward": float(rng.random() < 0.5),
                    "loss_mask": [1] * response,
                    "rollout_log_probs": [-rng.random()] * response,
                    "weight_versions": [str(rollout_id)],
                    "metadata": {},
                    "index": len(samples),
                    "group_index": len(samples) // 8,
                }
            )
            used += prompt + response
        torch.save({"rollout_id": rollout_id, "samples": samples}, directory / f"rollout_{rollout_id}.pt")
        written += used
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=10_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        source = Path(tmp) / "vime-output"
        source.mkdir()
        lines, _ = build_run_log(args.steps, seed=0, nan_every=17, noise_lines=20)
        (source / "driver.log").write_text("\n".join(lines) + "\n")
        tokens = write_dumps(source, args.steps, args.tokens)
        input_bytes = sum(p.stat().st_size for p in source.iterdir())
        started = time.perf_counter()
        result = ingest(source, Path(tmp) / "run")
        elapsed = time.perf_counter() - started
        assert result.ok, result.problems
        log_started = time.perf_counter()
        ingest(source / "driver.log")
        log_only = time.perf_counter() - log_started
    print(
        json.dumps(
            {
                "steps": args.steps,
                "log_lines": len(lines),
                "dumped_tokens": tokens,
                "input_mib": round(input_bytes / 2**20, 1),
                "records": len(result.records),
                "ingest_seconds": round(elapsed, 2),
                "log_only_seconds": round(log_only, 3),
                "machine": {**cpu_and_memory(), "python": platform.python_version(), "torch": torch.__version__, "load_average": os.getloadavg()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
