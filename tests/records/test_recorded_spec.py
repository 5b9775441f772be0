"""The one reader of a run's spec (harness.records.recorded_spec): spec.yaml first, else the argv;
a bad key is one line naming the file and the key, and the rest of the record still loads."""

from __future__ import annotations

from harness.records import RunDir
from harness.records.recorded_spec import recorded_spec


def test_spec_yaml_flags_win_over_the_argv():
    spec, problems = recorded_spec(
        {"rung": "top-p", "mode": "colocate", "backend": "embedded", "spec_hash": "abc", "flags": {"rollout-top-p": 0.95}}, ["--rollout-top-p", "0.5"]
    )
    assert problems == []
    assert (spec.rung, spec.mode, spec.backend, spec.spec_hash) == ("top-p", "colocate", "embedded", "abc")
    assert spec.flags == {"rollout-top-p": 0.95} and spec.flags_from == "spec.yaml" and spec.recorded


def test_an_ingested_run_takes_its_flags_from_the_argv_typed():
    # ingest writes labels and an empty flags mapping; a logged command line may start with the script
    spec, problems = recorded_spec(
        {"rung": "top-p", "flags": {}}, ["train.py", "--rollout-top-p", "0.95", "--colocate", "--seed", "3", "--bf16", "true"]
    )
    assert problems == []
    assert spec.flags == {"rollout-top-p": 0.95, "colocate": True, "seed": 3, "bf16": True}
    assert spec.flags_from == "argv" and spec.seed == 3 and spec.flag("rollout-top-k", -1) == -1


def test_no_spec_and_no_argv_is_an_empty_spec_not_an_error():
    spec, problems = recorded_spec(None, None)
    assert problems == [] and spec.flags == {} and spec.flags_from == "none" and not spec.recorded
    assert spec.rung is None and spec.seed is None


def test_a_bad_key_is_one_line_and_the_good_labels_stay():
    spec, problems = recorded_spec({"rung": "top-p", "flags": ["not", "a", "mapping"]}, ["--seed", "4"])
    assert len(problems) == 1 and problems[0].startswith("spec.yaml: key 'flags':"), problems
    assert spec.rung == "top-p" and spec.flags == {"seed": 4}


def test_the_loaded_run_carries_the_typed_spec_and_its_problems(tmp_path):
    run_dir = RunDir(tmp_path / "run").create()
    run_dir.write_spec({"rung": "near-aligned", "stage": 3, "flags": {"seed": 1}})
    run_dir.write_argv(["--seed", "1"])
    run_dir.set_status("finished", exit_code=0)
    run = run_dir.load()
    assert run.spec.rung == "near-aligned" and run.spec.stage is None and run.spec.seed == 1
    assert any(p.startswith("spec.yaml: key 'stage':") for p in run.problems), run.problems
