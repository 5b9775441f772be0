"""`harness ingest`: logs, log directories, TensorBoard events, debug dumps and run directories in;
a complete run directory (or JSON lines) out; bad input is one line each and exit code 2."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from vime_log_builder import build_run_log

from harness.records import RunDir, parse_log_file
from harness.records.ingest import ingest

REPO = Path(__file__).resolve().parents[2]


def harness_subprocess(*args):
    done = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=REPO)
    return done.returncode, done.stdout, done.stderr


def test_cli_writes_a_run_dir_whose_records_match_the_parse(vime_logs, tmp_path):
    code, out, err = harness_subprocess("ingest", vime_logs / "colocate_3_rollouts.log", "--runs-dir", tmp_path)
    assert code == 0, err
    run_path = Path(out.strip().splitlines()[-1])
    assert run_path.parent == tmp_path and run_path.name.startswith("ingested-")
    run = RunDir(run_path).load()
    parsed = parse_log_file(vime_logs / "colocate_3_rollouts.log")
    assert run.problems == [] and run.status.state == "finished" and run.status.steps_logged == 3
    assert [r.to_json_dict()["kind"] for r in run.records] == [r.kind for r in parsed.records]
    assert run.series("train/train_rollout_logprob_abs_diff") == [(0, 0.0183), (1, 0.0191), (2, 0.0187)]
    assert run.path.joinpath("log.txt").read_bytes() == (vime_logs / "colocate_3_rollouts.log").read_bytes()
    # same content -> same run id; a second ingest replaces it whole
    code, out2, _ = harness_subprocess("ingest", vime_logs / "colocate_3_rollouts.log", "--runs-dir", tmp_path)
    assert code == 0 and out2.strip().splitlines()[-1] == str(run_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [run_path.name]


def test_cli_json_prints_the_metrics_jsonl_shape(vime_logs, harness_cli):
    log = vime_logs / "single_process_no_ray.log"
    code, out, err = harness_cli("ingest", log, "--json")
    # This log prints no arguments, so nothing says how long the run was: every record is printed
    # (non-finite values as such), exit 0, and one line says the run is unfinished, of unknown length.
    assert code == 0 and err.splitlines() == [
        "state: unfinished (unknown length: nothing says how many rollouts the run was launched with "
        "(no num_rollout in the log's arguments; give it with --num-rollout); rollout ids logged: 0)"
    ]
    lines = [json.loads(line) for line in out.splitlines()]
    assert [set(line) for line in lines] == [{"kind", "n", "metrics"}] * 5
    assert lines[2]["kind"] == "step" and lines[2]["metrics"]["train/grad_norm"] == math.inf
    assert lines[1]["metrics"]["rollout/log_probs"] == -math.inf


def test_the_user_says_how_long_a_log_without_arguments_was(vime_logs, harness_cli, tmp_path):
    log = vime_logs / "single_process_no_ray.log"
    code, out, err = harness_cli("ingest", log, "--num-rollout", "1", "--out", tmp_path / "one")
    assert code == 0 and err.splitlines() == ["state: finished"]
    assert RunDir(tmp_path / "one").load().status.state == "finished"
    code, out, err = harness_cli("ingest", log, "--num-rollout", "2", "--out", tmp_path / "two")
    assert code == 0 and err.splitlines()[-1].startswith("state: unfinished (unfinished at rollout 1 of 2 (1 of 2 rollouts logged")
    run = RunDir(tmp_path / "two").load()
    assert run.status.state == "unfinished" and "unfinished at rollout 1 of 2" in run.status.note
    assert run.spec.flag("num-rollout") == 2  # a re-read knows the length too
    code, _, err = harness_subprocess("ingest", log, "--num-rollout", "0", "--json")
    assert code == 2 and err.count("\n") == 1 and "--num-rollout: expected at least 1 rollout, got 0" in err


def test_failed_run_gets_failed_status_with_the_root_cause(vime_logs, tmp_path):
    result = ingest(vime_logs / "cuda_oom_mid_run.log", tmp_path / "oom")
    run = RunDir(tmp_path / "oom").load()
    assert result.ok and run.status.state == "failed"
    assert run.status.failure.signature == "cuda-oom" and run.status.failure.line == 20
    assert run.steps() == [0]


def test_truncated_log_exits_2_but_keeps_every_readable_step(vime_logs, tmp_path, harness_cli):
    code, out, err = harness_cli("ingest", vime_logs / "truncated_mid_record.log", "--out", tmp_path / "cut")
    assert code == 2
    assert err.strip().splitlines()[:-1] == [
        f"error: {vime_logs / 'truncated_mid_record.log'}: line 25: truncated step record (not a complete Python "
        "literal ('{' was never closed at column 1)), parsed 24 lines"
    ]
    run = RunDir(tmp_path / "cut").load()
    assert run.steps() == [0, 1] and run.status.state == "interrupted" and run.problems == []


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary data (NUL byte at offset 8)"),
        (b"hello\nthis is not a VIME log\n", "no step/rollout/perf/eval records and no failure signatures"),
    ],
)
def test_unusable_input_is_one_line_exit_2_and_nothing_written(tmp_path, content, message, harness_cli):
    bad = tmp_path / "input.log"
    bad.write_bytes(content)
    runs = tmp_path / "runs"
    code, out, err = harness_cli("ingest", bad, "--runs-dir", runs)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err and "Traceback" not in err
    assert not runs.exists() or list(runs.iterdir()) == []


def test_missing_path(tmp_path, harness_cli):
    code, _, err = harness_cli("ingest", tmp_path / "absent.log")
    assert code == 2 and err == f"error: {tmp_path / 'absent.log'}: no such file or directory\n"


def test_mixed_logs_exit_2_with_all_records_kept(vime_logs, tmp_path, harness_cli):
    code, _, err = harness_cli("ingest", vime_logs / "two_runs_appended.log", "--out", tmp_path / "mixed")
    assert code == 2 and "mixes the output of more than one run" in err and err.count("error:") == 1
    assert [r.n for r in RunDir(tmp_path / "mixed").load().records if r.kind == "step"] == [0, 1, 2, 0]


def test_directory_of_logs_from_different_runs_is_flagged(vime_logs, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(vime_logs / "colocate_3_rollouts.log", logs / "a.log")
    shutil.copy(vime_logs / "nccl_and_illegal_access.log", logs / "b.log")  # its step 0 differs
    result = ingest(logs)
    assert len(result.problems) == 1 and "the logs disagree" in result.problems[0]
    assert len(result.inputs["logs"]) == 2


def test_directory_of_one_runs_logs_and_stray_files(vime_logs, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = (vime_logs / "colocate_3_rollouts.log").read_text().splitlines(keepends=True)
    (logs / "driver.log.1").write_text("".join(lines[:14]))
    (logs / "driver.log.2").write_text("".join(lines[14:]))
    (logs / "notes.txt").write_text("launched by hand\n")
    (logs / "plot.png").write_bytes(b"\x89PNG\x00\x00")
    result = ingest(logs, tmp_path / "out")
    assert result.ok and RunDir(tmp_path / "out").load().steps() == [0, 1, 2]
    assert any("notes.txt: no VIME records" in w for w in result.warnings)
    assert any("plot.png: binary file" in w for w in result.warnings)


def test_run_directory_with_a_corrupt_file_is_named_and_its_steps_kept(vime_logs, tmp_path, harness_cli):
    ingest(vime_logs / "colocate_3_rollouts.log", tmp_path / "run")
    (tmp_path / "run" / "status.json").write_text("{not json")
    code, out, err = harness_cli("ingest", tmp_path / "run", "--json")
    assert code == 2 and err.startswith(f"error: {tmp_path / 'run'}/status.json: not valid JSON")
    assert len([line for line in out.splitlines() if json.loads(line)["kind"] == "step"]) == 3


# --- TensorBoard events, written by the same writer VIME uses (torch's SummaryWriter)


def _write_events(directory: Path, steps: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory))
    for n in range(steps):
        writer.add_scalar("train/train_rollout_logprob_abs_diff", 0.01 + n / 100, n)
        writer.add_scalar("train/loss", float("nan") if n == 1 else 0.5, n)
        writer.add_scalar("rollout/raw_reward", 0.25 * n, n)
        writer.add_scalar("perf/step_time", 90.0 + n, n)
        writer.add_scalar("passrate/pass@1", 0.5, n)
    writer.close()
    return next(directory.glob("events.out.tfevents.*"))


def test_tensorboard_events_become_records(tmp_path):
    _write_events(tmp_path / "tb", 3)
    result = ingest(tmp_path / "tb", tmp_path / "run")
    run = RunDir(tmp_path / "run").load()
    assert result.ok and run.steps() == [0, 1, 2]
    assert [round(v, 6) for _, v in run.series("train/train_rollout_logprob_abs_diff")] == [0.01, 0.02, 0.03]
    assert math.isnan(dict(run.series("train/loss"))[1])
    assert run.series("perf/step_time") == [(0, 90.0), (1, 91.0), (2, 92.0)]
    assert any("passrate/pass@1" in w for w in result.warnings)


def test_truncated_event_file_keeps_the_events_before_the_cut(tmp_path):
    events = _write_events(tmp_path / "tb", 5)
    data = events.read_bytes()
    events.write_bytes(data[: len(data) - 30])
    result = ingest(tmp_path / "tb")
    assert 3 <= len({r.n for r in result.records if r.kind == "step"}) <= 5


# --- debug dumps


def _rollout_dump(path: Path, rollout_id: int) -> None:
    samples = []
    for index, (prompt_len, response_len, reward) in enumerate([(3, 2, 1.0), (3, 4, 0.0)]):
        samples.append(
            {
                "tokens": list(range(prompt_len + response_len)),
                "response_length": response_len,
                "reward": reward,
                "loss_mask": [1] * response_len,
                "rollout_log_probs": [-0.5] * response_len,
                "weight_versions": ["3"],
                "metadata": {},
                "index": index,
                "group_index": 0,
            }
        )
    torch.save({"rollout_id": rollout_id, "samples": samples}, path)


def _train_dump(path: Path, rollout_id: int, rank: int) -> None:
    # Two samples: a short one with |diff| 0.4 on its one token, a long one with |diff| 0.1 on
    # three masked tokens (a fourth token is masked out and differs by 5). VIME's sample mean is
    # (0.4 + 0.1) / 2 = 0.25; a token mean would be (0.4 + 0.3) / 4 = 0.175.
    rollout_data = {
        "tokens": [[1, 2, 3], [1, 2, 4, 5, 6]],
        "log_probs": [torch.tensor([-0.1]), torch.tensor([-0.2, -0.2, -0.2, -5.0])],
        "rollout_log_probs": [[-0.5], [-0.3, -0.1, -0.3, 0.0]],
        "loss_masks": [torch.tensor([1]), torch.tensor([1, 1, 1, 0])],
        "response_lengths": [1, 4],
        "rewards": [1.0, 0.0],
    }
    torch.save({"rollout_id": rollout_id, "rank": rank, "rollout_data": rollout_data}, path)


def test_dumps_become_summary_records_with_vimes_abs_diff(tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    _rollout_dump(dumps / "rollout_0.pt", 0)
    _train_dump(dumps / "train_0_0.pt", 0, rank=0)
    _train_dump(dumps / "train_0_1.pt", 0, rank=1)  # a TP peer: the same samples again
    result = ingest(dumps, tmp_path / "run")
    assert result.ok, result.problems
    (record,) = result.records
    assert record.kind == "rollout" and record.n == 0
    assert record.metrics["dump/train_rollout_logprob_abs_diff"] == pytest.approx(0.25)
    assert record.metrics["dump/train_samples"] == 2 and record.metrics["dump/train_ranks"] == 2
    assert record.metrics["dump/tokens"] == 12 and record.metrics["dump/response_tokens"] == 6
    assert record.metrics["dump/raw_reward_mean"] == 0.5 and record.metrics["dump/rollout_log_probs_mean"] == -0.5
    run = RunDir(tmp_path / "run").load()
    assert run.dumps == ["rollout_0.pt", "train_0_0.pt", "train_0_1.pt"]
    assert (
        os.path.samefile(run.path / "dumps" / "rollout_0.pt", dumps / "rollout_0.pt")
        or (run.path / "dumps" / "rollout_0.pt").read_bytes() == (dumps / "rollout_0.pt").read_bytes()
    )


class NotAllowed:
    pass


def test_dump_with_arbitrary_objects_is_refused_unless_trusted(tmp_path):
    torch.save({"rollout_id": 0, "samples": [], "extra": NotAllowed()}, tmp_path / "odd.pt")
    result = ingest(tmp_path / "odd.pt")
    assert result.problems == [
        f"{tmp_path / 'odd.pt'}: holds objects that weights_only loading refuses; if you trust the file, rerun with --trust-dumps"
    ]


def test_corrupt_dump_is_one_line(tmp_path):
    (tmp_path / "rollout_0.pt").write_bytes(b"PK\x03\x04 not really a zip")
    result = ingest(tmp_path / "rollout_0.pt")
    assert len(result.problems) == 1 and result.problems[0].startswith(f"{tmp_path / 'rollout_0.pt'}: not a readable torch dump")


def test_logs_and_dumps_together(vime_logs, tmp_path):
    both = tmp_path / "both"
    both.mkdir()
    shutil.copy(vime_logs / "colocate_3_rollouts.log", both / "driver.log")
    _rollout_dump(both / "rollout_1.pt", 1)
    result = ingest(both, tmp_path / "run")
    run = RunDir(tmp_path / "run").load()
    assert result.ok and run.steps() == [0, 1, 2]
    assert run.series("dump/raw_reward_mean") == [(1, 0.5)]
    assert run.series("rollout/raw_reward")[1][1] == pytest.approx(0.4675)


def test_generated_log_round_trips_through_ingest(tmp_path):
    lines, expected = build_run_log(20, seed=3, nan_every=7)
    (tmp_path / "run.log").write_text("\n".join(lines) + "\n")
    result = ingest(tmp_path / "run.log", tmp_path / "run")
    run = RunDir(tmp_path / "run").load()
    assert result.ok and len(run.records) == len(expected) and run.steps() == list(range(20))


def test_sample_mean_with_a_partial_list_mask_matches_the_array_path():
    from harness.records.debug_dumps import _masked_sample_mean

    values, mask = [-0.5, -0.1, -9.0, -0.3], [1, 1, 0, 1]
    assert _masked_sample_mean(values, mask) == pytest.approx(-0.3)
    assert _masked_sample_mean(torch.tensor(values), torch.tensor(mask)) == pytest.approx(-0.3)
    assert _masked_sample_mean([], []) == 0.0  # VIME's denominator is at least 1


def test_ingested_status_spans_the_logged_time(vime_logs, tmp_path):
    ingest(vime_logs / "colocate_3_rollouts.log", tmp_path / "run")
    status = RunDir(tmp_path / "run").load().status
    assert (status.started, status.ended) == ("2026-11-20 10:00:02", "2026-11-20 10:04:10")
