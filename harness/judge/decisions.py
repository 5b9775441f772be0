"""RL-Align's execution decision records: `rl_kernel.execution_decision {json}` log lines that say
which log-prob operator actually ran (requested vs actual backend, decision, fallback reason).

The A/B gate reads them to prove a candidate path ran; the embedded trainer prints them in the
same shape as RL-Align's fork does.
"""

from __future__ import annotations

import json
import re

_DECISION = re.compile(r"rl_kernel\.execution_decision\s+(\{.*\})\s*$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_decisions(run) -> tuple[list[dict], list[str]]:
    """All decision records of a loaded run's log, and one warning per line that looked like one but
    did not parse."""
    log_path = run.path / "log.txt"
    decisions, warnings = [], []
    if not log_path.exists():
        return [], [f"{log_path}: no log to read execution decisions from"]
    with log_path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            match = _DECISION.search(ANSI.sub("", line))
            if not match:
                continue
            try:
                record = json.loads(match.group(1))
            except json.JSONDecodeError as err:
                warnings.append(f"{log_path.name} line {number}: execution decision is not valid JSON ({err.msg})")
                continue
            if isinstance(record, dict):
                record["_line"] = number
                decisions.append(record)
    return decisions, warnings


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
