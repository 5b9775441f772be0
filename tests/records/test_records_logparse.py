"""The VIME log parser against real-format driver output (tests/data/vime_logs)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vime_log_builder import build_run_log, render

from harness.records import LogFileError, LogParser, parse_log_file, parse_log_lines
from harness.records.lineclean import clean_line


def test_colocate_log_yields_every_record_with_its_actor(vime_logs):
    result = parse_log_file(vime_logs / "colocate_3_rollouts.log")
    assert [(r.kind, r.n) for r in result.records] == [(kind, n) for n in range(3) for kind in ("perf", "rollout", "step", "perf")]
    perf_sources = [r.source for r in result.records if r.kind == "perf" and r.n == 1]
    assert perf_sources == ["RolloutManager pid=2987", "MegatronTrainRayActor pid=3121"]
    assert result.failures == [] and result.stopped_at is None and result.warnings == []
    assert result.steps() == [0, 1, 2]


def test_values_survive_ansi_nan_and_numpy_reprs(vime_logs):
    steps = {r.n: r for r in parse_log_file(vime_logs / "colocate_3_rollouts.log").records if r.kind == "step"}
    assert steps[0].metrics["train/train_rollout_logprob_abs_diff"] == 0.0183
    assert math.isnan(steps[1].metrics["train/loss"])
    assert steps[2].metrics["train/grad_norm"] == 0.2314  # logged as np.float64(0.2314)
    assert steps[0].line == 14  # 1-based, counted in the raw file


def test_log_without_ray_reads_carriage_returns_inf_and_eval(vime_logs):
    result = parse_log_file(vime_logs / "single_process_no_ray.log")
    assert [(r.kind, r.n) for r in result.records] == [("perf", 0), ("rollout", 0), ("step", 0), ("perf", 0), ("eval", 0)]
    assert all(r.source is None for r in result.records)
    step = result.records[2].metrics
    assert step["train/grad_norm"] == math.inf and result.records[1].metrics["rollout/log_probs"] == -math.inf
    assert result.stopped_at is None  # a last line without newline that parses is complete


def test_truncated_last_record_stops_and_says_where(vime_logs):
    result = parse_log_file(vime_logs / "truncated_mid_record.log")
    assert result.stopped_at == 25
    assert result.steps() == [0, 1]
    assert result.warnings == result.bad_input
    assert result.warnings[0].startswith("line 25: truncated step record") and result.warnings[0].endswith("parsed 24 lines")


def test_malformed_record_mid_log_is_skipped_not_a_stop():
    lines = [render("step", 0, {"train/loss": 0.1}), "step 1: {'train/loss': 0.2, (RolloutManager pid=1) hi", render("step", 2, {"train/loss": 0.3})]
    result = parse_log_lines(lines)
    assert [r.n for r in result.records] == [0, 2]
    assert result.stopped_at is None
    assert result.bad_input == [result.warnings[0]] and result.warnings[0].startswith("line 2: malformed step record skipped")


def test_two_runs_in_one_log_are_reported_once_and_all_records_kept(vime_logs):
    result = parse_log_file(vime_logs / "two_runs_appended.log")
    assert len(result.bad_input) == 1
    assert "perf 0 follows perf 2 (line 22) from RolloutManager" in result.bad_input[0]
    assert [r.n for r in result.records if r.kind == "step"] == [0, 1, 2, 0]


def test_ray_repeats_of_an_older_record_are_not_mistaken_for_a_second_run():
    lines = [
        render("step", 5, {"a": 1.0}),
        render("step", 6, {"a": 2.0}),
        render("step", 5, {"a": 1.5}, source="MegatronTrainRayActor pid=3122", repeated=3),
    ]
    result = parse_log_lines(lines)
    assert result.bad_input == [] and len(result.records) == 3


@pytest.mark.parametrize(
    "log, expected",
    [
        ("cuda_oom_mid_run.log", [("python-traceback", 16), ("cuda-oom", 20), ("ray-actor-died", 26)]),
        ("nccl_and_illegal_access.log", [("nccl-error", 13), ("nccl-error", 14), ("cuda-illegal-memory-access", 15)]),
        ("rollout_engine_died.log", [("engine-dead", 14), ("engine-dead", 15), ("http-error", 16), ("connection-refused", 17), ("timeout", 18)]),
    ],
)
def test_failure_signatures_and_their_lines(vime_logs, log, expected):
    result = parse_log_file(vime_logs / log)
    assert [(f.signature, f.line) for f in result.failures] == expected


def test_traceback_frames_and_argument_dumps_are_not_failures(vime_logs):
    oom = parse_log_file(vime_logs / "cuda_oom_mid_run.log")
    assert "timeout" not in {f.signature for f in oom.failures}  # `raise TimeoutError(...)` was a source line
    clean = parse_log_file(vime_logs / "colocate_3_rollouts.log")  # has distributed_timeout_minutes
    assert clean.failures == []


def test_failure_text_keeps_the_actor():
    result = parse_log_lines(["\x1b[36m(MegatronTrainRayActor pid=7, ip=10.0.0.2)\x1b[0m RuntimeError: NCCL error in: x"])
    assert result.failures[0].text == "(MegatronTrainRayActor pid=7, ip=10.0.0.2) RuntimeError: NCCL error in: x"


def test_streaming_feed_returns_each_record_as_it_arrives():
    parser = LogParser()
    assert parser.feed("[2026-11-20 10:00:00] train.py:1 - starting\n") == []
    events = parser.feed(render("step", 0, {"train/loss": 0.5}) + "\n")
    assert [(e.kind, e.n, e.metrics) for e in events] == [("step", 0, {"train/loss": 0.5})]
    assert parser.feed("CUDA out of memory. Tried to allocate 2 GiB\n")[0].signature == "cuda-oom"
    assert parser.finish().lines_read == 3


def test_nul_bytes_stop_parsing_where_they_start():
    lines = [render("step", 0, {"a": 1.0}), "\x00\x00\x00garbage", render("step", 1, {"a": 2.0})]
    result = parse_log_lines(lines)
    assert result.stopped_at == 2 and [r.n for r in result.records] == [0]
    assert "binary data" in result.bad_input[0]


def test_nested_dicts_flatten_and_lists_are_left_out_with_a_warning():
    result = parse_log_lines(["step 0: {'train/a': {'b': 1.0}, 'train/flag': True, 'train/hist': [1, 2]}"])
    assert result.records[0].metrics == {"train/a/b": 1.0, "train/flag": 1}
    assert "'train/hist' is a list" in result.warnings[0] and result.bad_input == []


def test_clean_line_peels_every_layer():
    line = clean_line(
        "\x1b[36m(RolloutManager pid=77, ip=10.0.0.2)\x1b[0m [2026-11-20 10:00:01] rollout.py:612 - "
        "perf 3: {'perf/rollout_time': 1.0} [repeated 7x across cluster]\x1b[2m (Ray deduplicates logs "
        "by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/"
        "x.html#log-deduplication for more options.)\x1b[0m\n"
    )
    assert line.message == "perf 3: {'perf/rollout_time': 1.0}"
    assert line.source == "RolloutManager pid=77, ip=10.0.0.2"
    assert line.repeated == 7 and line.timestamp == "2026-11-20 10:00:01" and line.logged_at == "rollout.py:612"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"\n\n  \n", "empty file"),
        (b"PK\x03\x04\x00\x00binary", "binary data (NUL byte at offset 4)"),
    ],
)
def test_unreadable_files_get_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "run.log"
    path.write_bytes(content)
    with pytest.raises(LogFileError) as err:
        parse_log_file(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value) and "\n" not in str(err.value)


def test_missing_file_and_directory_are_named(tmp_path):
    with pytest.raises(LogFileError, match="no such file"):
        parse_log_file(tmp_path / "absent.log")
    with pytest.raises(LogFileError, match="is a directory"):
        parse_log_file(tmp_path)


def _same_metrics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all((isinstance(v, float) and math.isnan(v) and math.isnan(b[k])) or v == b[k] for k, v in a.items())


@pytest.mark.property
@settings(max_examples=30, deadline=None)
@given(steps=st.integers(1, 8), seed=st.integers(0, 2**16), nan_every=st.integers(0, 3), noise=st.integers(0, 4))
def test_built_logs_parse_back_to_the_records_they_hold(steps, seed, nan_every, noise):
    lines, expected = build_run_log(steps, seed=seed, nan_every=nan_every, noise_lines=noise)
    result = parse_log_lines(lines)
    assert [(r.kind, r.n, r.source) for r in result.records] == [(k, n, s) for k, n, _, s in expected]
    assert all(_same_metrics(r.metrics, e[2]) for r, e in zip(result.records, expected))
    assert result.bad_input == []


@pytest.mark.property
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_log_cut_anywhere_keeps_every_record_before_the_cut(data):
    lines, _ = build_run_log(4, seed=1, noise_lines=1)
    text = "\n".join(lines) + "\n"
    cut = data.draw(st.integers(0, len(text)))
    full = parse_log_lines(text.splitlines(keepends=True)).records
    partial = parse_log_lines(text[:cut].splitlines(keepends=True))
    complete = [r for r in full if sum(len(text) + 1 for text in lines[: r.line]) <= cut]
    assert [(r.kind, r.n, r.line) for r in partial.records][: len(complete)] == [(r.kind, r.n, r.line) for r in complete]
    assert len(partial.records) <= len(complete) + 1  # the cut line itself may still parse
    if partial.stopped_at is not None:
        assert partial.warnings[-1].startswith(f"line {partial.stopped_at}: truncated")


def test_async_interleaving_of_actors_is_not_a_mixed_log():
    """In async training the rollout manager runs a rollout ahead of the trainer: its perf N+1
    can print before the trainer's perf N. Each actor's own sequence still only moves forward."""
    from harness.records.merge import metric_series

    lines = [
        render("perf", 0, {"perf/rollout_time": 60.0}, source="RolloutManager pid=2987"),
        render("perf", 1, {"perf/rollout_time": 61.0}, source="RolloutManager pid=2987"),
        render("perf", 0, {"perf/train_time": 30.0}),
        render("perf", 2, {"perf/rollout_time": 62.0}, source="RolloutManager pid=2987"),
        render("perf", 1, {"perf/train_time": 31.0}),
    ]
    result = parse_log_lines(lines)
    assert result.bad_input == [] and len(result.records) == 5
    assert metric_series(result.records, "perf/train_time") == [(0, 30.0), (1, 31.0)]
    assert metric_series(result.records, "perf/rollout_time") == [(0, 60.0), (1, 61.0), (2, 62.0)]
