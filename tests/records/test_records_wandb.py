"""W&B as a run source: offline runs written by the real `wandb` package (through the embedded
trainer's tracking, which logs as VIME's log() does) are ingested with their values as logged;
an online run without network or credentials is one error line; a launched embedded run with
--use-wandb/--use-tensorboard leaves an offline run that ingests to the log's own records."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.records import RunDir, parse_log_file
from harness.records.environment import tracking_record
from harness.records.ingest import ingest
from harness.records.wandb_run import online_path, read_offline, row_record

REPO = Path(__file__).resolve().parents[2]

# Three rollouts logged the way VIME's log() sends them (step key inside each dict); the second
# rollout's loss is nan and its grad norm inf. `rollouts` may stop early (a killed run).
WRITER = """
import math, sys
from harness.embedded.tracking import Tracking
out, rollouts = sys.argv[1], int(sys.argv[2])
tracking = Tracking({"use-wandb": True, "wandb-project": "lab-test", "num-rollout": 3, "use-tensorboard": False}, out)
for r in range(rollouts):
    tracking.log({"rollout/raw_reward": 0.25 * r, "rollout/log_probs": -0.5}, "rollout/step", r)
    tracking.log({"train/loss": math.nan if r == 1 else 0.1 * r, "train/grad_norm": math.inf if r == 1 else 1.5}, "train/step", r)
    tracking.log({"perf/step_time": 2.0 + r, "rollout/response_len/mean": 7.0}, "rollout/step", r)
tracking.finish()
"""


def _offline_run(tmp_path: Path, rollouts: int) -> Path:
    out = tmp_path / f"wandb-{rollouts}"
    env = {**os.environ, "WANDB_SILENT": "true", "HOME": str(tmp_path)}  # no user settings or netrc
    env.pop("WANDB_API_KEY", None)
    subprocess.run([sys.executable, "-c", WRITER, str(out), str(rollouts)], check=True, cwd=REPO, env=env, capture_output=True, timeout=300)
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    return run_dir


@pytest.fixture(scope="module")
def offline_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("wandb")
    return {3: _offline_run(base, 3), 2: _offline_run(base, 2)}


def test_an_offline_run_ingests_with_its_values_as_logged(offline_runs, tmp_path):
    run_dir = offline_runs[3]
    result = ingest(run_dir.parent.parent, tmp_path / "run")  # the folder holding wandb/: side files are skipped
    assert result.ok and result.warnings == [], (result.problems, result.warnings)
    assert result.state() == "finished" and result.length.source == "the W&B run's config (num_rollout 3)"
    kinds = [(r.kind, r.n) for r in result.records]
    assert kinds == [(k, n) for n in range(3) for k in ("rollout", "step", "perf")]
    step1 = next(r for r in result.records if (r.kind, r.n) == ("step", 1))
    assert math.isnan(step1.metrics["train/loss"]) and step1.metrics["train/grad_norm"] == math.inf
    perf2 = next(r for r in result.records if (r.kind, r.n) == ("perf", 2))
    assert perf2.metrics == {"perf/step_time": 4.0, "rollout/response_len/mean": 7.0}  # the manager's rollout/ keys stay with perf
    written = RunDir(tmp_path / "run").load()
    assert written.status.state == "finished" and written.spec.flag("num-rollout") == 3
    tracking = written.ingest["tracking"]["wandb"]
    assert tracking["project"] == "lab-test" and tracking["run_id"] == run_dir.name.rsplit("-", 1)[1]
    assert written.ingest["inputs"]["wandb"] == [str(next(run_dir.glob("run-*.wandb")))]


def test_an_offline_run_that_stopped_early_is_unfinished_at_its_first_missing_rollout(offline_runs):
    result = ingest(offline_runs[2])
    assert result.state() == "unfinished" and result.note.startswith("unfinished at rollout 2 of 3")


def test_a_cut_transaction_log_keeps_the_records_before_the_cut(offline_runs, tmp_path):
    whole = next(offline_runs[3].glob("run-*.wandb")).read_bytes()
    cut = tmp_path / "offline-run-20261203_000000-cut" / "run-cut.wandb"
    cut.parent.mkdir()
    # Where a given fraction of the file falls depends on what wandb wrote: a cut can land on a
    # record boundary (nothing is damaged then). Cut inside a record: the first byte past two thirds
    # where the reader finds a damaged record.
    damaged = None
    for end in range(len(whole) * 2 // 3, len(whole) * 2 // 3 - 512, -1):
        cut.write_bytes(whole[:end])
        run = read_offline(cut.parent)
        if any("damaged or cut at byte" in w for w in run.warnings):
            damaged = run
            break
    assert damaged is not None, "no cut in 512 bytes before two thirds of the file landed inside a record"
    assert damaged.problems == [] and 0 < len(damaged.records) < 9 and damaged.exit_code is None
    not_wandb = tmp_path / "x.wandb"
    not_wandb.write_bytes(b"hello")
    assert read_offline(not_wandb).problems == [f"{not_wandb}: not a W&B transaction log (expected the ':W&B' header, got b'hello')"]


def test_history_rows_become_records_by_their_metric_group():
    assert row_record({"train/loss": 0.1, "train/step": 4, "_step": 9}, "w").model_dump(include={"kind", "n", "metrics"}) == {
        "kind": "step",
        "n": 4,
        "metrics": {"train/loss": 0.1},
    }
    assert row_record({"eval/aime": 0.3, "eval/step": 2}, "w").kind == "eval"
    assert row_record({"_runtime": 3.0, "_step": 1}, "w") is None


def test_online_paths_are_recognised():
    assert online_path("wandb:ent/proj/abc123") == "ent/proj/abc123"
    assert online_path("https://wandb.ai/ent/proj/runs/abc123?nw=1") == "ent/proj/abc123"
    assert online_path("reports/runs/x") is None and online_path("wandb:only/two") is None


def test_an_online_run_without_network_or_credentials_is_one_error_line(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "cfg")}
    env.pop("WANDB_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "ingest", "https://wandb.ai/ent/proj/runs/abc123", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: wandb:ent/proj/abc123: the run could not be read through wandb's public API"
    )


def test_a_launched_embedded_run_with_wandb_and_tensorboard_on(tmp_path):
    """The embedded trainer logs through VIME's route (W&B offline, TensorBoard); the offline run
    ingests to the log's own records (float64, exactly), and the log names the run for the record."""
    env = {**os.environ, "HOME": os.environ.get("HOME", str(tmp_path))}
    env.pop("WANDB_API_KEY", None)
    sets = ["num-rollout=2", "use-wandb=true", "use-tensorboard=true", "wandb-project=lab-ci"]
    command = [sys.executable, "-m", "harness", "run", "--stage", "p0", "--rung", "fp8-plus-filters", "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(command + [a for s in sets for a in ("--set", s)], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run_path = Path(done.stdout.strip().splitlines()[-1])
    log = parse_log_file(run_path / "log.txt")
    assert log.argument_int("num_rollout") == 2 and "training finished" not in (run_path / "log.txt").read_text()
    (wandb_dir,) = (run_path / "wandb").glob("offline-run-*")
    assert log.tracking["wandb_dir"] == str(wandb_dir)
    result = ingest(wandb_dir)
    assert result.ok and result.state() == "finished", (result.problems, result.note)
    logged: dict = {}
    for record in log.records:
        logged.setdefault((record.kind, record.n), {}).update(record.metrics)
    assert {(r.kind, r.n) for r in result.records} == set(logged)
    for record in result.records:
        assert all(logged[(record.kind, record.n)][k] == v for k, v in record.metrics.items()), record
    assert list((run_path / "tensorboard").glob("events.out.tfevents.*"))
    record = tracking_record({"use-wandb": True, "use-tensorboard": True, "wandb-project": "lab-ci"}, log.tracking, run_path)
    assert record["wandb"]["mode"] == "offline" and record["wandb"]["project"] == "lab-ci" and record["wandb"]["dir"] == str(wandb_dir)
    assert record["links"]["TensorBoard logs"] == (run_path / "tensorboard").resolve().as_uri()
    RunDir(run_path).record_tracking(record)
    environment = json.loads((run_path / "environment.json").read_text())
    assert environment["wandb"]["run_id"] == wandb_dir.name.rsplit("-", 1)[1] and "hardware" in environment


def test_an_online_runs_banner_gives_its_path_and_link_for_the_environment_record():
    from harness.records import parse_log_lines

    parsed = parse_log_lines(
        [
            "wandb: Tracking run with wandb version 0.31.0",
            "wandb: Run data is saved locally in /shared/runs/r1/wandb/run-20261203_101500-abc123",
            "wandb: Syncing run misty-sun-3",
            "wandb: ⭐️ View project at: https://wandb.ai/ent/proj",
            "\x1b[34m\x1b[1mwandb\x1b[0m: 🚀 View run misty-sun-3 at: https://wandb.ai/ent/proj/runs/abc123",
        ]
    )
    assert parsed.tracking["wandb_url"] == "https://wandb.ai/ent/proj/runs/abc123" and parsed.records == []
    record = tracking_record({"use-wandb": True, "wandb-project": "proj"}, parsed.tracking, environ={"WANDB_MODE": "online"})
    assert record["wandb"]["path"] == "ent/proj/abc123" and record["wandb"]["mode"] == "online"
    assert record["links"] == {"W&B": "https://wandb.ai/ent/proj/runs/abc123"} and "tensorboard" not in record
    quiet = tracking_record({"use-wandb": True, "use-tensorboard": True}, {}, environ={})
    assert "no 'wandb:' banner line" in quiet["wandb"]["note"] and quiet["tensorboard"]["dir"] is None
    assert tracking_record({}, parsed.tracking) == {}  # W&B off: nothing claimed
