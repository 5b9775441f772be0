"""A run's `rl_kernel.execution_decision {json}` log lines (RL-Align's execution decision records),
read from its log.txt; harness.judge.decisions says what they mean."""

from __future__ import annotations

import json
import re
from pathlib import Path

_DECISION = re.compile(r"rl_kernel\.execution_decision\s+(\{.*\})\s*$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_decisions(run_path: Path) -> tuple[list[dict], list[str]]:
    """All decision records of a run directory's log, and one warning per line that looked like one
    but did not parse."""
    log_path = Path(run_path) / "log.txt"
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
