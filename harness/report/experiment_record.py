"""The experiment record: one JSON file a pytest session writes, from which the experiment page is drawn.

    <summary dir>/experiment/experiment.json      (reports/experiment/ for `make baseline`)

It holds what the judged tests decided, as plain data: the seed's summary rows (with the test
that made each), each rung's judgement, the A/B answers, the baseline's environment and argv,
the baseline's worst tokens when the token audit had dumps, and the outcome of every test that
contributed (filled in from pytest's reports at session end). Entries are built here from the
judge's own objects so the fixtures only pass them on; the record and its entries are the pydantic
models of harness.report.record_model, and `load_record` validates a file into them, saying the
first problem in one line.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from harness.report.record_model import (
    ENTRY_MODELS,
    AbAnswer,
    Environment,
    ExperimentRecord,
    Row,
    Rung,
    Session,
    TestRef,
    WorstTokens,
)

FILE_NAME = "experiment.json"
FOLDER = "experiment"
# The seed's five candidate questions (A/B gate), in its order; `key` is the judge's name for the
# question that answers it (harness.judge.ab.QUESTIONS, mode consistency), None when no test does.
SEED_QUESTIONS = (
    ("drift-reduced", "Does the B-card operator reduce train_rollout_logprob_abs_diff?"),
    ("reward-preserved", "Does it preserve or improve rollout/raw_reward?"),
    ("timings", "Does it improve rollout throughput or logprob recomputation time?"),
    (None, "Does it introduce numerical drift under BF16/FP8 mixed paths?"),
    ("mode-consistency", "Does it behave consistently between colocate and non-colocate modes?"),
)
WORST_TOKENS_KEPT = 20


class RecordError(Exception):
    """A record that cannot be read, said in one line (file, key, expected)."""


def test_ref(item_nodeid: str, title: str) -> TestRef:
    """How the page names and links the Allure test that produced an entry."""
    return TestRef(nodeid=item_nodeid, name=item_nodeid.rsplit("::", 1)[-1], title=title)


def row_entry(row, kind: str, test: TestRef, replicates: int = 1) -> Row:
    """A summary row (harness.report.summary.SummaryRow) with the check that made it."""
    return Row(**row.to_dict(), kind=kind, replicates=replicates, test=test)


def rung_entry(case, judgement, row, test: TestRef) -> Rung:
    """One rung's judgement (harness.judge.ladder.RungJudgement) and its summary row's interval."""
    diff = judgement.diff
    expected = case.rung.expect.drift_class
    return Rung(
        **{
            "stage": case.stage,
            "rung": case.rung.id,
            "title": case.rung.title,
            "parent": judgement.parent,
            "mode": case.mode,
            "run_id": row.run_id,
            "mean": judgement.child_mean,
            "ci": list(row.abs_diff_ci) if row.abs_diff_ci else None,
            "parent_mean": judgement.parent_mean,
            "delta": diff.diff if diff else None,
            # The interval the direction was decided on: at the Holm-adjusted level of the stage's family.
            "delta_ci": [judgement.outcome.low, judgement.outcome.high] if judgement.outcome else ([diff.low, diff.high] if diff else None),
            "confidence": judgement.outcome.confidence if judgement.outcome else (diff.confidence if diff else None),
            "decision": judgement.evidence.get("decision"),
            "decided_class": judgement.drift_class,
            # Classes the evidence rules out, with the evidence: all an undetermined delta can still show.
            "ruled_out": dict(judgement.ruled_out),
            "expected_class": [expected],
            "expected_ruled_out": list(case.rung.expect.rules_out),
            "observed_direction": judgement.observed_direction,
            "expected_direction": case.rung.expect.direction,
            "reasons": list(judgement.reasons),
            "problems": list(judgement.problems),
            # Seeds a side; with more than one, the interval is over seeds and steps (harness.judge.variance).
            "replicates": (judgement.evidence.get("replicates") or {}).get("count", 1),
            # The paired per-token delta on the parent's recorded tokens (harness.judge.paired), or why not checked.
            "paired_delta": judgement.evidence.get("paired_delta"),
            "margin": (judgement.evidence.get("decision") or {}).get("margin"),
            "replicate_means": {k: v for k, v in (judgement.evidence.get("replicates") or {}).items() if isinstance(v, dict)},
            "test": test,
        }
    )


def ab_entry(key: str, answer_question: str, pair, *, passed: bool, message: str, evidence: dict | None, test: TestRef) -> AbAnswer:
    baseline, candidate = pair
    return AbAnswer(
        **{
            "key": key,
            "question": answer_question,
            "passed": bool(passed),
            "message": message,
            "evidence": evidence or {},
            "baseline_run": baseline.id,
            "candidate_run": candidate.id,
            "mode": candidate.spec.mode,
            "test": test,
        }
    )


def environment_entry(run, label: str) -> Environment:
    """The run's environment record (harness.records.environment) and its exact argv."""
    env = run.environment or {}
    return Environment(
        **{
            "label": label,
            "run_id": run.id,
            "run_dir": str(run.path),
            "stage": run.spec.stage,
            "rung": run.spec.rung,
            "mode": run.spec.mode,
            "backend": run.spec.backend,
            "spec_hash": run.spec.spec_hash,
            "harness": env.get("harness"),  # {"commit", "dirty"} from harness.records.commit
            "vime": env.get("vime"),
            "container": env.get("container"),
            "hardware": env.get("hardware"),
            "versions": env.get("versions"),
            "os": env.get("os"),
            "argv": list(run.argv or []),
            "recorded": bool(env),
        }
    )


def worst_tokens_entry(run, audit) -> WorstTokens:
    return WorstTokens(run_id=run.id, rung=run.spec.rung, rows=[dict(row) for row in audit.worst_tokens[:WORST_TOKENS_KEPT]])


def new_record(*, argv: list[str] | None = None, options: dict | None = None) -> ExperimentRecord:
    return ExperimentRecord(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        session=Session(argv=list(argv if argv is not None else sys.argv), options=options or {}),
    )


def as_entry(kind: str, entry: BaseModel | dict) -> BaseModel:
    """An entry as its kind's model: entries cross pytest-xdist workers as dicts and are validated
    again here (a dict with a misspelt key fails, naming it)."""
    model = ENTRY_MODELS.get(kind)
    if model is None:
        raise ValueError(f"experiment record: unknown kind {kind!r} (one of {', '.join(ENTRY_MODELS)})")
    return entry if isinstance(entry, model) else model.model_validate(entry.model_dump() if isinstance(entry, BaseModel) else entry)


def entry_data(entry: BaseModel | dict) -> dict:
    """An entry as plain data, for pytest-xdist's worker output (builtin types only: execnet refuses a
    str subclass such as torch's version string, and the worker's whole output is then lost)."""
    data = entry.model_dump() if isinstance(entry, BaseModel) else dict(entry)
    return json.loads(json.dumps(data, default=str))


def add_entry(record: ExperimentRecord, kind: str, entry: BaseModel | dict) -> None:
    """kind: rows / rungs / ab / answers / budgets / readiness / candidate / environment (lists, environment
    deduplicated by run) or worst_tokens."""
    entry = as_entry(kind, entry)
    if kind == "worst_tokens":
        record.worst_tokens = record.worst_tokens or entry
    elif kind == "environment":
        if all(e.run_id != entry.run_id for e in record.environment):
            record.environment.append(entry)
    else:
        getattr(record, kind).append(entry)


def tested_nodeids(record: ExperimentRecord) -> set[str]:
    """The node ids of the tests that made the record's entries (their outcomes go into `outcomes`)."""
    kinds = ("rows", "rungs", "ab", "answers", "budgets", "readiness", "candidate")
    return {e.test.nodeid for kind in kinds for e in getattr(record, kind) if e.test is not None}


def write_record(record: ExperimentRecord, folder: str | Path) -> Path:
    from harness.records.atomic import atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAME
    atomic_write_text(path, json.dumps(record.to_data(), indent=1, default=str, allow_nan=True))
    return path


def validation_problem(err: ValidationError) -> str:
    """One of a ValidationError's problems as "key 'rungs[2].mean': expected ...; got ...", with the
    count of the rest. A wrong value is said before a missing key: it is the more specific of the two."""
    problems = sorted(err.errors(), key=lambda e: e["type"] == "missing")
    first = problems[0]
    key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".") or "(top level)"
    got = first.get("input")
    if first["type"] == "missing":
        said = "missing (a required key)"
    elif first["type"] == "extra_forbidden":
        said = f"no such key (a misspelling?); got {type(got).__name__}"
    else:
        # pydantic says "Input should be a valid list": the line says "expected a valid list".
        said = f"{first['msg'].replace('Input should be ', 'expected ', 1)}; got {type(got).__name__} {' '.join(repr(got).split())[:60]}"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"key {key!r}: {said}{more}"


def load_record(folder: str | Path) -> ExperimentRecord:
    """experiment.json from a folder (or the file itself); RecordError in one line otherwise."""
    path = Path(folder)
    if path.is_dir():
        path = path / FILE_NAME
    if not path.is_file():
        raise RecordError(f"{path}: no such file; pass a folder holding {FILE_NAME} (a pytest session with --alluredir writes one)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{path}: not readable JSON ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a JSON object, got {type(data).__name__}")
    try:
        record = ExperimentRecord.model_validate(data)
    except ValidationError as err:
        raise RecordError(f"{path}: {validation_problem(err)}") from None
    record._path = str(path)
    return record


def differences(a: ExperimentRecord, b: ExperimentRecord) -> list[str]:
    """What two records of the same runs disagree on, answer for answer: every entry (rows, rungs,
    A/B answers, judged answers, environments, worst tokens) and every outcome, compared as data;
    when and by which front end each was written is not compared. Empty when they agree."""
    found = []
    for kind in ("rows", "rungs", "ab", "answers", "environment"):
        left, right = (sorted(json.dumps(entry_data(e), sort_keys=True, default=str) for e in getattr(r, kind)) for r in (a, b))
        only_a, only_b = [e for e in left if e not in right], [e for e in right if e not in left]
        found += [f"{kind}: only in the first record: {e[:300]}" for e in only_a]
        found += [f"{kind}: only in the second record: {e[:300]}" for e in only_b]
    if (a.worst_tokens and entry_data(a.worst_tokens)) != (b.worst_tokens and entry_data(b.worst_tokens)):
        found.append("worst_tokens differ")
    for nodeid in sorted(a.outcomes.keys() | b.outcomes.keys()):
        if a.outcomes.get(nodeid) != b.outcomes.get(nodeid):
            found.append(f"outcome of {nodeid}: {a.outcomes.get(nodeid)} vs {b.outcomes.get(nodeid)}")
    if a.min_margin_se != b.min_margin_se:
        found.append(f"min_margin_se: {a.min_margin_se} vs {b.min_margin_se}")
    return found
