"""A run's `rl_kernel.execution_decision {json}` log lines (RL-Align's execution decision records),
read from its log.txt (harness.records.log_evidence reads every evidence line in one pass);
harness.judge.decisions says what they mean."""

from __future__ import annotations

from pathlib import Path

from harness.records.log_evidence import read_log_evidence


def read_decisions(run_path: Path) -> tuple[list[dict], list[str]]:
    """All decision records of a run directory's log (each with its log.txt line as `_line`), and
    one warning per line that looked like one but did not parse."""
    evidence = read_log_evidence(run_path)
    if not evidence.read:
        return [], [f"{Path(run_path) / 'log.txt'}: no log to read execution decisions from"]
    return [dict(d) for d in evidence.decisions], list(evidence.problems)
