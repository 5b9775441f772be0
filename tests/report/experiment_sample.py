"""A small experiment record built the way a session builds one, without trainer runs.

Run directories come from runbuilder (the real writers); the rungs are judged by the real judge
(harness.experiment.evidence.judge_rung), the rows by summary_row_from_run, the A/B answers by
harness.judge.ab; the entries by harness.report.experiment_record. Only the metric series are
chosen here, so the page shows figures computed from them, never typed in.
"""

from __future__ import annotations

from pathlib import Path

from runbuilder import make_run, noisy, perf_series, resolved_spec

from fixtures.knobs import RungCase
from harness import DEFAULT_KNOBS_DIR
from harness.experiment.evidence import contract_problems, judge_rung
from harness.judge import ab
from harness.report import experiment_record as entries
from harness.report.record_model import ExperimentRecord
from harness.report.summary import summary_row_from_run
from harness.spec import load_knobs

# rung -> abs-diff level (nats): the ladder's shape on this machine, roughly (docs/embedded.md).
# Every rung `make baseline` judges at P1, so the first screen is checked at its real length.
LADDER_LEVELS = {
    "fp32-floor": 2e-6,
    "near-aligned": 0.0135,
    "fp8-rollout": 0.031,
    "top-p": 0.016,
    "top-k": 0.015,
    "temperature": 0.014,
    "stale-weights": 0.09,
    "fp8-plus-filters": 0.036,
}
AB_LEVELS = {"fp8-plus-filters": 0.036, "candidate-operator": 0.012}


def build_sample_record(root: Path, stage: str = "p1", mode: str = "colocate") -> ExperimentRecord:
    knobs = load_knobs(DEFAULT_KNOBS_DIR)
    runs = {}
    for i, (rung, level) in enumerate(LADDER_LEVELS.items()):
        spec = resolved_spec(stage, rung, mode)
        steps = int(spec["flags"]["num-rollout"])  # every step the spec asks for: the judge counts missing ones
        runs[rung] = make_run(
            root,
            f"{stage}-{rung}",
            spec,
            abs_diff=noisy(level, steps, 10 + i),
            reward=noisy(0.4, steps, 40 + i),
            perf=perf_series(steps, 70 + i),
        )
    record = entries.new_record(argv=["pytest", "-m", "p1 or (p3 and ab)", "--mode=colocate"], options={"mode": mode, "backend": "embedded"})
    for rung_id, run in runs.items():
        rung = knobs.rungs[rung_id]
        parent = runs.get(rung.parent) if rung.parent else None
        nodeid = f"tests/ladder/test_ladder.py::test_rung_against_parent[{stage}-{rung_id}]"
        title = f"{rung.title} [{stage}]"
        judgement = judge_rung(rung, knobs, lambda rid, **_: runs[rid])
        row = summary_row_from_run(run, f"{stage}:{rung_id}", parent=parent, knobs=knobs, notes=f"{rung_id}: class {judgement.drift_class}")
        entries.add_entry(record, "rows", entries.row_entry(row, "rung", entries.test_ref(nodeid, title)))
        entries.add_entry(
            record, "rungs", entries.rung_entry(RungCase(stage, rung, mode, "embedded"), judgement, row, entries.test_ref(nodeid, title))
        )
        record.outcomes[nodeid] = "passed" if not judgement.problems else "failed"
        if rung.parent is None:
            entries.add_entry(record, "environment", entries.environment_entry(run, f"ladder root {stage}:{rung_id}"))
    pair = []
    for i, (rung, level) in enumerate(AB_LEVELS.items()):
        spec = resolved_spec("p3", rung, mode)
        steps = int(spec["flags"]["num-rollout"])
        pair.append(
            make_run(
                root, f"p3-{rung}", spec, abs_diff=noisy(level, steps, 90 + i), reward=noisy(0.4, steps, 95 + i), perf=perf_series(steps, 99 + i)
            )
        )
    pair = tuple(pair)
    contract_id = "tests/ab/test_ab_gate.py::test_same_workload_contract"
    for run, label, kind in ((pair[0], f"baseline ({mode})", "ab-baseline"), (pair[1], f"candidate ({mode})", "ab-candidate")):
        row = summary_row_from_run(run, label, parent=pair[0] if kind == "ab-candidate" else None, knobs=knobs, notes=f"A/B {kind[3:]}")
        entries.add_entry(record, "rows", entries.row_entry(row, kind, entries.test_ref(contract_id, "same-workload contract")))
    entries.add_entry(record, "environment", entries.environment_entry(pair[0], f"A/B baseline ({mode})"))
    problems = contract_problems(*pair, knobs)
    entries.add_entry(
        record,
        "ab",
        entries.ab_entry(
            "contract",
            "same-workload contract",
            pair,
            passed=not problems,
            message="; ".join(problems) or "same workload",
            evidence=None,
            test=entries.test_ref(contract_id, "same-workload contract"),
        ),
    )
    record.outcomes[contract_id] = "passed" if not problems else "failed"
    for key, judge in sorted(ab.QUESTIONS.items()):
        answer = judge(*pair, knobs)
        nodeid = f"tests/ab/test_ab_gate.py::test_question[{key}]"
        entries.add_entry(
            record,
            "ab",
            entries.ab_entry(
                key,
                answer.question,
                pair,
                passed=answer.passed,
                message=answer.message,
                evidence=answer.evidence,
                test=entries.test_ref(nodeid, answer.question),
            ),
        )
        record.outcomes[nodeid] = "passed" if answer.passed else "failed"
    return record
