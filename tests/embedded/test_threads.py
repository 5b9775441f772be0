"""An embedded run computes the same numbers beside another run as alone (harness.embedded.threads:
one intra-op thread in every embedded process), so the launcher may run several at once
(harness.launch.parallel) without changing any result. Real short runs, real vLLM and Megatron-Core."""

from __future__ import annotations

import json
import time

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.runs import LaunchSettings, RunSource
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
SHORT = {"num-rollout": 3}


def numbers(run) -> list[dict]:
    """Every logged metric but the timings (perf/*), step by step."""
    rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.get("metrics", {}).items() if not k.startswith("perf/")} for row in rows]


def test_a_run_beside_another_computes_exactly_what_it_computes_alone(tmp_path):
    alone = RunSource(KNOBS, "embedded", tmp_path / "alone", launch=LaunchSettings(session_started=time.time(), parallel_runs=1))
    beside = RunSource(KNOBS, "embedded", tmp_path / "beside", launch=LaunchSettings(session_started=time.time(), parallel_runs=2))
    first = alone("p1", "fp8-rollout", "colocate", seed=9101, **SHORT)
    pair = beside.many([("p1", "fp8-rollout", "colocate", {"seed": 9101, **SHORT}), ("p1", "fp8-rollout", "colocate", {"seed": 9102, **SHORT})])
    assert [r.status.state for r in (first, *pair)] == ["finished"] * 3
    assert numbers(first) == numbers(pair[0]) and len(numbers(first)) == 3 * 3  # rollout, step and perf lines
    assert numbers(pair[0]) != numbers(pair[1])  # another seed: the comparison can tell runs apart
    for run in (first, *pair):
        record = json.loads((run.path / "embedded_record.json").read_text())
        assert record["hardware"]["threads"] == 1
