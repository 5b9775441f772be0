"""Short real runs of ``python -m harness.embedded.train`` (real vLLM, real Megatron-Core).

Runs are cached per argv within the session, so checks that need the same run share it. The model
and prompts come from the factory cache (``$LAB_CACHE_DIR``, default ``<repo>/.cache/embedded``).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"train\.py:\d+ - (step|rollout|perf) (\d+): (\{.*\})$")

# A miniature of the P0 profile: 4 prompts x 4 samples, 2 rollouts, fp32 both sides, no filters.
BASE_ARGS = [
    "--hf-checkpoint",
    "embedded://model/qwen3-tiny",
    "--prompt-data",
    "embedded://data/arith-dapo",
    "--apply-chat-template",
    "--input-key",
    "prompt",
    "--label-key",
    "label",
    "--rm-type",
    "deepscaler",
    "--num-rollout",
    "2",
    "--rollout-batch-size",
    "4",
    "--n-samples-per-prompt",
    "4",
    "--global-batch-size",
    "16",
    "--rollout-max-response-len",
    "24",
    "--seed",
    "1234",
    "--rollout-temperature",
    "1.0",
    "--rollout-top-p",
    "1.0",
    "--rollout-top-k",
    "-1",
    "--vllm-dtype",
    "float32",
    "--vllm-logprobs-mode",
    "processed_logprobs",
]


def _literal(text: str) -> dict:
    # VIME's dicts may hold nan/inf: map them to names literal_eval accepts, then back.
    cleaned = re.sub(r"\b(nan|inf)\b", r"'\1'", text)
    return {k: (float(v) if isinstance(v, str) else v) for k, v in ast.literal_eval(cleaned).items()}


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    out_dir: Path
    lines: dict

    def series(self, kind: str, key: str) -> list[float]:
        return [metrics[key] for _, metrics in sorted(self.lines[kind].items())]

    def mean(self, kind: str, key: str) -> float:
        values = self.series(kind, key)
        return sum(values) / len(values)


def parse_lines(stdout: str) -> dict:
    lines: dict = {"step": {}, "rollout": {}, "perf": {}}
    for raw in stdout.splitlines():
        m = LINE.search(raw)
        if m:
            lines[m.group(1)][int(m.group(2))] = _literal(m.group(3))
    return lines


@pytest.fixture(scope="session")
def thresholds() -> dict:
    data = yaml.safe_load((REPO / "knobs" / "thresholds.yaml").read_text())["thresholds"]
    return {name: entry["value"] for name, entry in data.items()}


@pytest.fixture(scope="session")
def trainer(tmp_path_factory, pytestconfig):
    """``trainer(*extra_args)`` -> Run; same args in one session -> the same (cached) run.
    Forked from a pre-imported interpreter unless ``--cold-start`` (then, or when that interpreter
    cannot start, ``python -m harness.embedded.train`` as a subprocess)."""
    from fixtures.options import COLD_START
    from harness.launch.warm import WarmStartUnavailable, run_to_end

    cache: dict[tuple, Run] = {}
    warm = not pytestconfig.getoption(COLD_START)

    def run(*extra: str, base: list[str] | None = None, timeout: int = 420) -> Run:
        args = list(BASE_ARGS if base is None else base) + list(extra)
        key = tuple(args)
        if key not in cache:
            out = tmp_path_factory.mktemp("embedded-run")
            argv = args + [
                "--embedded-output-dir",
                str(out),
                "--save-debug-rollout-data",
                str(out / "dumps" / "rollout_{rollout_id}.pt"),
                "--save-debug-train-data",
                str(out / "dumps" / "train_{rollout_id}_{rank}.pt"),
            ]
            command = [sys.executable, "-m", "harness.embedded.train", *argv]
            try:
                code, stdout = run_to_end(command, REPO, dict(os.environ), timeout) if warm else (None, "")
                stderr = stdout  # one stream: the fork gets one pipe
            except WarmStartUnavailable:
                code = None
            if code is None:
                proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
                code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
            cache[key] = Run(code, stdout, stderr, out, parse_lines(stdout))
        return cache[key]

    return run


def assert_finished(run: Run, steps: int = 2) -> None:
    assert run.returncode == 0, f"trainer exited {run.returncode}: {run.stderr.strip().splitlines()[-3:]}"
    assert sorted(run.lines["step"]) == list(range(steps)), run.stdout[-2000:]


def refused_in_one_line(out_dir: Path, *flags: str) -> str:
    """Launch the embedded trainer with BASE_ARGS + `flags` and return its one `error:` line: it must
    exit non-zero with exactly one such line and no traceback (bad input is a clear error)."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness.embedded.train", *BASE_ARGS, *flags, "--embedded-output-dir", str(out_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    return lines[0]
