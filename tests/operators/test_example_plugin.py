"""The example operator package (examples/vime-example-operator), installed as a kernel author's would be.

tools/setup_env.py installs it into .venv (pip install -e); nothing here imports it directly. The
registry must find it through its entry point, the bench must measure it on CPU like a built-in,
and the embedded backend must run a short A/B with it as the candidate operator path: the same
workload as the baseline except the operator, its path logged as taken in both engines.
docs/plugging-in-an-operator.md walks through the same steps.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from harness.operators import bench, registry, render
from harness.operators.registry import ENTRY_POINT_GROUP
from tests.operators.conftest import threshold

pytestmark = pytest.mark.operator

PLUGIN = "example-fp32-chunked"
DIST = "vime-example-operator"
# The A/B pair: the shortest P1 run of the near-aligned rung (BF16 on both sides, no filters), the
# baseline on each engine's native log-probs and the candidate on the plug-in in both engines.
ROLLOUTS = 3


def _installed() -> bool:
    return any(ep.name == PLUGIN for ep in entry_points(group=ENTRY_POINT_GROUP))


needs_plugin = pytest.mark.skipif(not _installed(), reason=f"{DIST} is not installed here (python3 tools/setup_env.py installs it)")


@needs_plugin
def test_the_registry_finds_the_example_through_its_entry_point():
    from harness.embedded.logprob_operator import usable_names

    (ep,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == PLUGIN]
    assert ep.dist is not None and ep.dist.metadata["Name"] == DIST, ep
    assert PLUGIN in registry.names() and PLUGIN not in registry.plugin_errors(), registry.plugin_errors()
    op = registry.get(PLUGIN)
    assert op.available() == (True, "") and op.contract.has_backward and op.contract.semantics == "raw"
    assert PLUGIN in usable_names()  # both engines of the embedded backend can take it


@needs_plugin
def test_the_bench_measures_the_example_on_cpu(small_bundle_cpu):
    record = bench.run_bench(small_bundle_cpu, "cpu", [PLUGIN], reps=2, warmup=1)
    (row,) = record["results"]
    assert row["available"] and "error" not in row and "backward_error" not in row, row
    # fp32 logits on bf16 operands: the fused operator's accuracy target applies (knobs/operator_thresholds.yaml)
    assert row["max_abs_err"] <= threshold("fused_max_abs_err"), row["max_abs_err"]
    assert row["grad_rel_err_hidden"] is not None and row["fwd_bwd_ms_median"] > 0
    assert row["input_stats"] == record["input_stats"] and record["input_stats"]["rows"] == small_bundle_cpu.hidden.shape[0]
    assert any(r[0].startswith(PLUGIN) for r in render.rows(record))


@needs_plugin
def test_an_embedded_ab_with_the_example_as_the_candidate(get_run):
    from fixtures.knobs import session_knobs
    from harness.experiment.evidence import contract_problems
    from harness.judge import ab
    from harness.records.execution_decisions import read_decisions

    if get_run.backend != "embedded":
        pytest.skip(f"the plug-in is the embedded backend's operator path; this session's backend is {get_run.backend!r}")
    short = {"num-rollout": ROLLOUTS}
    baseline = get_run("p1", "near-aligned", "colocate", **short)
    candidate = get_run("p1", "near-aligned", "colocate", **short, **{"embedded-logprob-operator": PLUGIN})
    knobs = session_knobs()
    assert contract_problems(baseline, candidate, knobs) == []  # one workload; the candidate logged its path, no fallback
    assert ab.what_changed(baseline, candidate, knobs) == [f"operator path: embedded-logprob-operator None -> '{PLUGIN}'"]
    decisions, _ = read_decisions(candidate.path)
    assert decisions and all(d.get("actual_backend") == PLUGIN for d in decisions), decisions[:2]
    metric = "train/train_rollout_logprob_abs_diff"
    for run in (baseline, candidate):
        assert len(run.series(metric)) == ROLLOUTS, run.series(metric)
