"""The experiment record: one JSON file a pytest session writes, from which the experiment page is drawn.

    <summary dir>/experiment/experiment.json      (reports/experiment/ for `make baseline`)

It holds what the judged tests decided, as plain data: the seed's summary rows (with the test
that made each), each rung's judgement, the A/B answers, the baseline's environment and argv,
the baseline's worst tokens when the token audit had dumps, and the outcome of every test that
contributed (filled in from pytest's reports at session end). Entries are built here from the
judge's own objects so the fixtures only pass them on; `load_record` reads a file back with one
line per problem.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = 1
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


def test_ref(item_nodeid: str, title: str) -> dict:
    """How the page names and links the Allure test that produced an entry."""
    return {"nodeid": item_nodeid, "name": item_nodeid.rsplit("::", 1)[-1], "title": title}


def rung_entry(case, judgement, row, test: dict) -> dict:
    """One rung's judgement (harness.judge.ladder.RungJudgement) and its summary row's interval."""
    diff = judgement.diff
    expected = case.rung.expect.drift_class
    return {
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
        # Seeds a side; with more than one, the interval is over seeds and steps (stats.hierarchical_diff_ci).
        "replicates": (judgement.evidence.get("replicates") or {}).get("count", 1),
        # The paired per-token delta on the parent's recorded tokens (harness.judge.paired), or why not checked.
        "paired_delta": judgement.evidence.get("paired_delta"),
        "margin": (judgement.evidence.get("decision") or {}).get("margin"),
        "replicate_means": {k: v for k, v in (judgement.evidence.get("replicates") or {}).items() if isinstance(v, dict)},
        "test": test,
    }


def ab_entry(key: str, answer_question: str, pair, *, passed: bool, message: str, evidence: dict | None, test: dict) -> dict:
    baseline, candidate = pair
    return {
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


def environment_entry(run, label: str) -> dict:
    """The run's environment record (harness.records.environment) and its exact argv."""
    env = run.environment or {}
    return {
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


def worst_tokens_entry(run, audit) -> dict:
    return {"run_id": run.id, "rung": run.spec.rung, "rows": [dict(row) for row in audit.worst_tokens[:WORST_TOKENS_KEPT]]}


def new_record(*, argv: list[str] | None = None, options: dict | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "session": {"argv": list(argv if argv is not None else sys.argv), "options": options or {}},
        "rows": [],
        "rungs": [],
        "ab": [],
        "environment": [],
        "worst_tokens": None,
        "outcomes": {},
        # Every judged answer with its margin in standard errors (harness.report.answers).
        "answers": [],
    }


def add_entry(record: dict, kind: str, entry) -> None:
    """kind: rows / rungs / ab / environment (lists, environment deduplicated by run) or worst_tokens."""
    if kind == "worst_tokens":
        record["worst_tokens"] = record["worst_tokens"] or entry
    elif kind == "environment":
        if all(e["run_id"] != entry["run_id"] for e in record["environment"]):
            record["environment"].append(entry)
    elif kind in ("rows", "rungs", "ab", "answers"):
        record.setdefault(kind, []).append(entry)
    else:
        raise ValueError(f"experiment record: unknown kind {kind!r}")


def write_record(record: dict, folder: str | Path) -> Path:
    from harness.records.atomic import atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAME
    atomic_write_text(path, json.dumps(record, indent=1, default=str, allow_nan=True))
    return path


REQUIRED = {"schema": int, "rows": list, "rungs": list, "ab": list, "environment": list}


def load_record(folder: str | Path) -> dict:
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
    for key, kind in REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise RecordError(f"{path}: key {key!r}: expected {kind.__name__}, got {type(data.get(key)).__name__}")
    if data["schema"] != SCHEMA:
        raise RecordError(f"{path}: key 'schema': expected {SCHEMA}, got {data['schema']}")
    data.setdefault("outcomes", {})
    data.setdefault("worst_tokens", None)
    data.setdefault("answers", [])
    data["_path"] = str(path)
    return data
