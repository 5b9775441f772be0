"""The end of a run from evidence: no end line is needed; a run is finished when its records cover
every rollout id below the num_rollout it printed (or the user gave), else unfinished at the first
rollout that is missing, and "unknown length" when nothing says N."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vime_log_builder import argument_lines, build_run_log, render

from harness.records import RunDir, parse_log_lines
from harness.records.completion import Length, completion, length_from_arguments
from harness.records.ingest import ingest
from harness.records.models import Record


def _write(tmp_path, lines, name="vime.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_argument_print_gives_the_length_and_the_steps_per_rollout():
    parsed = parse_log_lines(argument_lines(5, steps_per_rollout=2))
    assert parsed.arguments["num_rollout"] == "5" and parsed.argument_lines["num_rollout"] == 3
    length = length_from_arguments(parsed.arguments, parsed.argument_lines)
    assert (length.num_rollout, length.steps_per_rollout, length.start_rollout_id) == (5, 2, None)
    assert "line 3" in length.source
    # Megatron prints without a logging prefix too (its own print), indented by two spaces.
    bare = parse_log_lines(["------------------------ arguments ------------------------", "  num_rollout ............ 7"])
    assert bare.argument_int("num_rollout") == 7
    # Prose with dots is not an argument.
    assert parse_log_lines(["[2026-11-20 10:00:00] train.py:1 - waiting ... done"]).arguments == {}


def test_steps_per_rollout_follows_vime_when_not_printed():
    args = {"num_rollout": "3", "num_steps_per_rollout": "None", "rollout_batch_size": "32", "n_samples_per_prompt": "8", "global_batch_size": "128"}
    assert length_from_arguments(args, {}).steps_per_rollout == 2


@pytest.mark.property
@settings(max_examples=25, deadline=None)
@given(rollouts=st.integers(1, 6), data=st.data())
def test_a_log_cut_at_any_record_is_unfinished_at_the_first_rollout_it_lacks(rollouts, data):
    """The builder interleaves the rollout manager's perf line, the trainer's lines and other
    actors' noise per rollout, as a colocated VIME run prints them."""
    lines, _ = build_run_log(rollouts, seed=rollouts, noise_lines=1)
    full = parse_log_lines(lines)
    length = length_from_arguments(full.arguments, full.argument_lines)
    assert completion(full.records, length).complete
    # Cut before any record's line up to the last train step (what follows it, the trainer's perf
    # line, is timing: the rollout is trained once its step is logged).
    last_step = max(r.line for r in full.records if r.kind == "step")
    cut_at = data.draw(st.sampled_from([r.line for r in full.records if r.line <= last_step]))
    kept = parse_log_lines(lines[: cut_at - 1]).records  # everything before that record's line
    done = completion(kept, length)
    assert not done.complete
    trained = {r.n for r in kept if r.kind == "step"}
    expected = next(r for r in range(rollouts) if r not in trained)
    assert done.next_rollout == expected and done.note.startswith(f"unfinished at rollout {expected} of {rollouts}")


def test_the_rollout_manager_perf_alone_does_not_finish_a_rollout_whose_train_step_is_missing():
    manager_perf = render("perf", 0, {"perf/rollout_time": 60.0}, source="RolloutManager pid=2987")
    parsed = parse_log_lines(argument_lines(1) + [manager_perf])
    done = completion(parsed.records, length_from_arguments(parsed.arguments, parsed.argument_lines))
    assert done.note.startswith("unfinished at rollout 0 of 1: its train steps 0 are not all logged")
    parsed = parse_log_lines(argument_lines(1, steps_per_rollout=2) + [manager_perf, render("step", 0, {"train/loss": 0.1})])
    done = completion(parsed.records, length_from_arguments(parsed.arguments, parsed.argument_lines))
    assert done.note.startswith("unfinished at rollout 0 of 1: its train steps 0..1 are not all logged")
    # A --debug-rollout-only run trains nothing: its rollouts are whole without steps.
    parsed = parse_log_lines([*argument_lines(1, debug_rollout_only=True), manager_perf])
    assert parsed.arguments["debug_rollout_only"] == "True"
    assert completion(parsed.records, length_from_arguments(parsed.arguments, parsed.argument_lines)).complete


def test_unknown_length_is_never_finished():
    records = [Record(kind="rollout", n=n, metrics={}) for n in range(3)]
    done = completion(records, None)
    assert not done.complete and done.note.startswith("unknown length") and "rollout ids logged: 0..2" in done.note
    assert completion(records, Length(3, "--num-rollout")).complete
    resumed = Length(5, "the log's arguments", start_rollout_id=2)
    assert completion([Record(kind="perf", n=n, metrics={}) for n in (2, 3, 4)], resumed).complete
    # A resumed VIME run prints start_rollout_id None (the checkpoint decides it later): its log
    # starts at the resume point, and a log cut before its end is still unfinished.
    unknown_start = Length(5, "the log's arguments")
    done = completion([Record(kind="perf", n=n, metrics={}) for n in (2, 3, 4)], unknown_start)
    assert done.complete and "from rollout 2, the first logged" in done.note
    cut = completion([Record(kind="perf", n=n, metrics={}) for n in (2, 3)], unknown_start)
    assert cut.note.startswith("unfinished at rollout 4 of 5 (2 of 3 rollouts logged")
    fresh = Length(5, "the log's arguments", start_rollout_id=0)
    assert completion([Record(kind="perf", n=n, metrics={}) for n in (2, 3, 4)], fresh).note.startswith("unfinished at rollout 0 of 5")


def test_a_finished_log_keeps_nan_and_inf_as_logged(tmp_path):
    lines, expected = build_run_log(6, seed=4, nan_every=2)
    result = ingest(_write(tmp_path, lines), tmp_path / "run")
    assert result.ok and result.state() == "finished" and result.num_rollout == 6
    run = RunDir(tmp_path / "run").load()
    assert run.status.state == "finished" and run.spec.flag("num-rollout") == 6
    loss = dict(run.series("train/loss"))
    grad = dict(run.series("train/grad_norm"))
    assert [n for n, v in loss.items() if isinstance(v, float) and math.isnan(v)] == [0, 2, 4]
    assert [n for n, v in grad.items() if v == math.inf] == [0, 2, 4]


def test_the_users_length_and_the_logs_must_agree(tmp_path):
    lines, _ = build_run_log(3, seed=1)
    log = _write(tmp_path, lines)
    result = ingest(log, num_rollout=4)
    assert result.problems == [
        f"{log}: --num-rollout 4, but the log's arguments (line 3: num_rollout 3): the log was launched with another length; the log's own number is used"
    ]
    assert result.state() == "finished"


def test_two_argument_prints_with_different_lengths_are_two_runs(tmp_path):
    first, _ = build_run_log(2, seed=1)
    second, _ = build_run_log(3, seed=2)
    result = ingest(_write(tmp_path, first + second))
    assert any("argument num_rollout printed again as '3'" in p for p in result.problems)


def test_a_run_directory_that_says_finished_is_checked_against_its_records(tmp_path):
    lines, _ = build_run_log(3, seed=1)
    ingest(_write(tmp_path, lines), tmp_path / "run")
    assert ingest(tmp_path / "run").state() == "finished"
    again = ingest(tmp_path / "run", num_rollout=5)
    assert again.state() == "unfinished" and "says finished, but its records stop: unfinished at rollout 3 of 5" in again.note


# --- real excerpts (tests/data/vime_logs/real/SOURCES.md names the issue each was cut from)


@pytest.mark.parametrize(
    ("name", "records", "logged"),
    [
        ("slime_1837_rollout_manager_perf.log", [("perf", 0, "RolloutManager pid=1805485")], "rollout ids logged: 0"),
        ("slime_1527_rollout_line.log", [("rollout", 0, None)], "rollout ids logged: 0"),
        ("prorl_40_slime_steps.log", [("step", 1, None), ("step", 28, None)], "no rollout logged"),
    ],
)
def test_real_excerpts_are_read_and_labelled_unknown_length(vime_logs, name, records, logged):
    result = ingest(vime_logs / "real" / name)
    assert result.ok, result.problems  # read, not refused
    assert [(r.kind, r.n, r.source) for r in result.records] == records
    assert result.state() == "unfinished" and result.note.startswith("unknown length") and result.note.endswith(logged)


def test_a_real_excerpt_finishes_or_not_by_the_length_the_user_gives(vime_logs):
    log = vime_logs / "real" / "slime_1527_rollout_line.log"
    assert ingest(log, num_rollout=1).state() == "finished"
    longer = ingest(log, num_rollout=100)
    assert longer.state() == "unfinished" and longer.note.startswith("unfinished at rollout 1 of 100 (1 of 100 rollouts logged")
    record = longer.records[0]
    assert record.metrics["rollout/log_probs"] == -0.22009427845478058 and record.metrics["rollout/rewards"] == 0.0


def test_a_real_excerpt_of_interleaved_trainer_ranks_ending_in_a_traceback_is_failed(vime_logs):
    result = ingest(vime_logs / "real" / "slime_pr828_trainer_ranks_then_traceback.log", num_rollout=1)
    assert result.ok and result.state() == "failed"
    assert [(r.kind, r.n, r.source) for r in result.records] == [("rollout", 0, "MegatronTrainRayActor pid=197171")]
    assert result.failures[0].signature == "python-traceback"
