"""Secrets never reach a record: spec.yaml, argv.json, environment.json, log.txt (launched and
ingested) show `<redacted>`, while the trainer itself still receives the value."""

from __future__ import annotations

import json
import sys

import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.launch.runner import LaunchOptions, ensure_run
from harness.records.ingest import ingest
from harness.records.redact import is_secret_name, redact_argv, redact_text
from harness.spec import load_knobs, resolve

SECRET = "wb-Zq81XkF3mP0aLs9"
ENV_SECRET = "hf-Rt55PqL0aZ-secret-value"

# A trainer that prints its argv as VIME does at start-up, and keeps what it received elsewhere.
TRAINER_SCRIPT = (
    "import os, sys\n"
    "open(os.environ['RECEIVED_ARGV'], 'w').write(' '.join(sys.argv[1:]))\n"
    "print('[2026-12-01 09:00:00] train.py:40 - launch args:', ' '.join(sys.argv[1:]), flush=True)\n"
    "key = sys.argv[sys.argv.index('--wandb-key') + 1]\n"
    "print(\"[2026-12-01 09:00:00] train.py:41 - args: {'wandb_key': '%s', 'input_key': 'prompt'}\" % key, flush=True)\n"
    "print(\"[2026-12-01 09:00:01] model.py:540 - step 0: {'train/loss': 0.1}\", flush=True)\n"
    # Its one rollout is recorded, so the run is finished by its records (no end line is needed).
    "print(\"[2026-12-01 09:00:01] rollout.py:90 - rollout 0: {'rollout/raw_reward': 0.5}\", flush=True)\n"
)


@pytest.mark.parametrize(
    "name, secret",
    [
        ("wandb-key", True),
        ("hf-token", True),
        ("WANDB_API_KEY", True),
        ("db-password", True),
        ("aws-credentials", True),
        ("client_secret", True),
        ("input-key", False),
        ("label-key", False),
        ("max-tokens-per-gpu", False),
        ("seed", False),
        # A word in the middle of a name says what the flag is about, not that its value is a secret:
        # redacting `probs` hid every "probs" in the log, processed_logprobs included.
        ("moe-token-dispatcher-type", False),
        ("moe-token-drop-policy", False),
    ],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_flag_values_that_are_not_secrets_stay_in_the_text():
    from harness.records.redact import secret_values

    flags = {"moe-token-drop-policy": "probs", "moe-token-dispatcher-type": "alltoall", "wandb-key": SECRET}
    assert secret_values(flags) == {SECRET}


def test_redaction_of_argv_and_text_keeps_everything_else():
    assert redact_argv(["--wandb-key", SECRET, "--input-key", "prompt", "--hf-token=abc", "--num-rollout", "3"]) == [
        "--wandb-key",
        "<redacted>",
        "--input-key",
        "prompt",
        "--hf-token=<redacted>",
        "--num-rollout",
        "3",
    ]
    line = f"cmd --wandb-key {SECRET} --input-key prompt WANDB_API_KEY={SECRET} {{'wandb_key': '{SECRET}'}}"
    assert redact_text(line) == ("cmd --wandb-key <redacted> --input-key prompt WANDB_API_KEY=<redacted> {'wandb_key': '<redacted>'}")


def test_a_launched_run_records_no_secret_but_the_trainer_gets_it(tmp_path, monkeypatch):
    received = tmp_path / "received.txt"
    monkeypatch.setenv("RECEIVED_ARGV", str(received))
    monkeypatch.setenv("NCCL_AUTH_TOKEN", ENV_SECRET)  # a relevant variable (NCCL_*) that is a secret
    spec = resolve(load_knobs(DEFAULT_KNOBS_DIR), "p1", "near-aligned", "colocate", "embedded", {"num-rollout": 1, "wandb-key": SECRET})
    runs = tmp_path / "runs"
    run_dir = ensure_run(spec, LaunchOptions(runs_dir=runs, trainer=(sys.executable, "-c", TRAINER_SCRIPT), progress=False))
    assert f"--wandb-key {SECRET}" in received.read_text()  # the launch kept the value
    for file in sorted(p for p in run_dir.path.rglob("*") if p.is_file()):
        assert SECRET not in file.read_text(errors="replace"), f"{file.name} holds the secret"
        assert ENV_SECRET not in file.read_text(errors="replace"), f"{file.name} holds the environment secret"
    argv = json.loads(run_dir.file("argv.json").read_text())
    assert argv[argv.index("--wandb-key") + 1] == "<redacted>"
    assert json.loads(run_dir.file("environment.json").read_text())["env"]["NCCL_AUTH_TOKEN"] == "<redacted>"
    assert "<redacted>" in run_dir.file("spec.yaml").read_text()
    assert "--wandb-key <redacted>" in run_dir.file("log.txt").read_text()
    assert run_dir.load().status.state == "finished"


def test_an_ingested_log_is_copied_with_its_secrets_redacted(tmp_path):
    log = tmp_path / "vime.log"
    log.write_text(
        f"[2026-12-01 09:00:00] train.py:40 - python3 train.py --wandb-key {SECRET} --num-rollout 1\n"
        f"[2026-12-01 09:00:00] train.py:41 - env: WANDB_API_KEY={SECRET}\n"
        "[2026-12-01 09:00:01] model.py:540 - step 0: {'train/loss': 0.1}\n"
        "[2026-12-01 09:00:02] train.py:98 - training finished\n"
    )
    result = ingest(log, tmp_path / "run")
    assert result.ok
    copied = (tmp_path / "run" / "log.txt").read_text()
    assert SECRET not in copied and copied.count("<redacted>") == 2
    assert copied.splitlines()[2:] == log.read_text().splitlines()[2:]  # the rest byte for byte


def test_a_failure_line_that_quotes_the_secret_is_recorded_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("RECEIVED_ARGV", str(tmp_path / "received.txt"))
    failing = TRAINER_SCRIPT + "print('ConnectionRefusedError: wandb login with ' + key + ' refused', flush=True)\nsys.exit(1)\n"
    spec = resolve(load_knobs(DEFAULT_KNOBS_DIR), "p1", "near-aligned", "colocate", "embedded", {"num-rollout": 1, "wandb-key": SECRET})
    run_dir = ensure_run(spec, LaunchOptions(runs_dir=tmp_path / "runs", trainer=(sys.executable, "-c", failing), progress=False))
    status = run_dir.load().status
    assert status.state == "failed" and status.failure.signature == "connection-refused"
    assert status.failure.text == "ConnectionRefusedError: wandb login with <redacted> refused"
    assert not [f.name for f in run_dir.path.rglob("*") if f.is_file() and SECRET in f.read_text(errors="replace")]
