"""The run directory: atomic writes, streaming appends that survive a kill, readers that keep
whatever is readable and name what is not."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.records import Failure, Record, RunDir

SPEC = {"stage": "p0", "rung": "near-aligned", "flags": {"num-rollout": 3, "rollout-top-p": 1.0}}


def _full_run(path):
    run_dir = RunDir(path).create()
    run_dir.write_spec(SPEC)
    run_dir.write_argv(["python", "-m", "harness.embedded.train", "--num-rollout", "3"])
    run_dir.write_environment({"vime": {"commit": None}, "env": {}})
    run_dir.set_status("running")
    with run_dir:
        for n in range(3):
            run_dir.append_log(f"step {n}: {{'train/loss': {0.1 * n}}}")
            run_dir.append_record(Record(kind="step", n=n, metrics={"train/loss": 0.1 * n, "train/train_rollout_logprob_abs_diff": 0.01 + n / 1000}))
            run_dir.append_record(Record(kind="perf", n=n, metrics={"perf/rollout_time": 5.0}, source="RolloutManager pid=1"))
            run_dir.append_record(Record(kind="perf", n=n, metrics={"perf/train_time": 7.0, "perf/step_time": math.nan}))
    run_dir.set_status("finished", exit_code=0)
    return run_dir


def test_round_trip(tmp_path):
    run = _full_run(tmp_path / "run-a").load()
    assert run.problems == []
    assert run.id == "run-a" and run.argv[-1] == "3"
    assert (run.spec.stage, run.spec.rung, run.spec.flags, run.spec.flags_from) == ("p0", "near-aligned", SPEC["flags"], "spec.yaml")
    assert run.status.state == "finished" and run.status.exit_code == 0 and run.status.steps_logged == 3
    assert run.status.started <= run.status.ended
    assert run.steps() == [0, 1, 2]
    assert run.series("train/train_rollout_logprob_abs_diff") == [(0, 0.01), (1, 0.011), (2, 0.012)]
    # perf printed twice per rollout: both records kept, one merged value per key and n
    assert len([r for r in run.records if r.kind == "perf"]) == 6
    assert run.series("perf/rollout_time") == [(0, 5.0), (1, 5.0), (2, 5.0)]
    assert all(math.isnan(v) for _, v in run.series("perf/step_time"))
    assert run.conflicts() == []


def test_metrics_jsonl_has_exactly_the_documented_shape(tmp_path):
    run_dir = _full_run(tmp_path / "r")
    first = json.loads(run_dir.file("metrics.jsonl").read_text().splitlines()[0])
    assert first == {"kind": "step", "n": 0, "metrics": {"train/loss": 0.0, "train/train_rollout_logprob_abs_diff": 0.01}}


def test_conflicting_values_for_one_n_are_reported_not_averaged(tmp_path):
    run_dir = RunDir(tmp_path / "r").create()
    run_dir.append_record(Record(kind="perf", n=0, metrics={"perf/step_time": 90.0}))
    run_dir.append_record(Record(kind="perf", n=0, metrics={"perf/step_time": 95.0}))
    run_dir.close()
    run = run_dir.load()
    assert run.series("perf/step_time") == [(0, 90.0)]
    assert run.conflicts() == ["perf/step_time at n=0: kept 90.0, a later perf record says 95.0"]


def test_failed_status_carries_the_signature(tmp_path):
    run_dir = RunDir(tmp_path / "r").create()
    run_dir.set_status("running")
    status = run_dir.set_status("failed", failure=Failure(signature="cuda-oom", line=20, text="CUDA out of memory"), exit_code=1)
    assert status["failure"] == {"signature": "cuda-oom", "line": 20, "text": "CUDA out of memory"}
    assert run_dir.load().status.failure.signature == "cuda-oom"
    with pytest.raises(ValueError, match="expected one of running, finished, failed, interrupted"):
        run_dir.set_status("done")


def test_torn_last_line_is_dropped_and_named(tmp_path):
    run_dir = _full_run(tmp_path / "r")
    with run_dir.file("metrics.jsonl").open("a") as handle:
        handle.write('{"kind": "step", "n": 3, "metr')
    run = run_dir.load()
    assert run.steps() == [0, 1, 2]
    assert run.problems == ["metrics.jsonl: line 10 is torn (the run was killed while writing it); kept 9 records"]


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("spec.yaml", "flags: [unclosed", "spec.yaml: not readable YAML"),
        ("spec.yaml", "- just\n- a list\n", "spec.yaml: expected a mapping, found list"),
        ("argv.json", '{"not": "a list"}', "argv.json: expected a JSON list, found dict"),
        ("environment.json", "{oops", "environment.json: not valid JSON"),
        ("status.json", '{"state": "exploded"}', "status.json: key 'state': Input should be"),
        (
            "metrics.jsonl",
            '{"kind": "step", "n": 0, "metrics": {}}\nnot json\n{"kind": "nope", "n": 1, "metrics": {}}\n',
            "metrics.jsonl: line 2 is not a {kind, n, metrics} record",
        ),
    ],
)
def test_a_corrupt_file_is_named_and_the_rest_still_loads(tmp_path, name, content, expected):
    run_dir = _full_run(tmp_path / "r")
    run_dir.file(name).write_text(content)
    run = run_dir.load()
    assert len(run.problems) == 1 and run.problems[0].startswith(expected), run.problems
    if name != "metrics.jsonl":
        assert run.steps() == [0, 1, 2]
    else:
        assert "(and 1 more bad lines); kept 1 records" in run.problems[0]


@pytest.mark.parametrize("name", ["spec.yaml", "argv.json", "environment.json", "status.json"])
def test_a_missing_file_is_named(tmp_path, name):
    run_dir = _full_run(tmp_path / "r")
    run_dir.file(name).unlink()
    run = run_dir.load()
    assert run.problems == [f"{name}: missing"] and run.steps() == [0, 1, 2]


def test_missing_metrics_are_reparsed_from_the_log(tmp_path):
    run_dir = _full_run(tmp_path / "r")
    run_dir.file("metrics.jsonl").unlink()
    run = run_dir.load()
    assert run.steps() == [0, 1, 2]
    assert run.problems == ["metrics.jsonl: missing; 3 records re-parsed from log.txt"]


def test_not_a_directory(tmp_path):
    run = RunDir(tmp_path / "nope").load()
    assert run.problems == [f"{tmp_path / 'nope'}: no such run directory"] and run.records == []


def test_atomic_writes_leave_no_temp_files(tmp_path):
    run_dir = _full_run(tmp_path / "r")
    for _ in range(3):
        run_dir.write_spec(SPEC)
    assert sorted(p.name for p in run_dir.path.iterdir()) == [
        "argv.json",
        "dumps",
        "environment.json",
        "log.txt",
        "metrics.jsonl",
        "spec.yaml",
        "status.json",
    ]


def test_a_killed_writer_keeps_every_record_it_appended(tmp_path):
    """A real process appends records and is SIGKILLed mid-stream; the reader keeps them all."""
    path = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import sys, time
        from harness.records import Record, RunDir
        run_dir = RunDir({str(path)!r}).create()
        run_dir.set_status("running")
        for n in range(10_000):
            run_dir.append_log(f"step {{n}}: {{{{'train/loss': 0.5}}}}")
            run_dir.append_record(Record(kind="step", n=n, metrics={{"train/loss": 0.5}}))
            if n == 20:
                print("ready", flush=True)
            time.sleep(0.001)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd(), start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run = RunDir(path).load()
    steps = run.steps()
    assert len(steps) > 20 and steps == list(range(len(steps)))
    assert run.status.state == "running"  # the launcher, not the dead process, marks it interrupted
    log_lines = path.joinpath("log.txt").read_text().splitlines()
    assert len(log_lines) >= len(steps)
