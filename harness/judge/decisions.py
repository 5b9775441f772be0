"""RL-Align's execution decision records: `rl_kernel.execution_decision {json}` log lines that say
which log-prob operator actually ran (requested vs actual backend, decision, fallback reason).

The A/B gate judges them to prove a candidate path ran (harness.records.execution_decisions reads
them from a run's log); the embedded trainer prints them in the same shape as RL-Align's fork does.
"""

from __future__ import annotations


def decision_fields(record: dict) -> tuple[str, str, str, str]:
    """(requested, actual, decision, reason) under RL-Align's names or the short ones some logs use."""
    requested = str(record.get("requested_backend") or record.get("requested") or "")
    actual = str(record.get("actual_backend") or record.get("actual") or record.get("backend") or "")
    decision = str(record.get("decision") or "")
    reason = str(record.get("fallback_reason") or record.get("reason") or "")
    return requested, actual, decision, reason


def is_fallback(record: dict) -> bool:
    requested, actual, decision, _ = decision_fields(record)
    return decision.startswith("fallback") or bool(requested and actual and requested != actual)


def fallbacks(decisions: list[dict]) -> list[dict]:
    """Decisions where the requested backend did not run: a fallback, or actual != requested."""
    return [record for record in decisions if is_fallback(record)]
