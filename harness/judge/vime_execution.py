"""Did a VIME candidate's operator path run? Judged from the run's own log, never from its flags.

The flags say what the candidate asked for: RL-Kernel operators (`--enable-rl-kernel` with
`--rl-kernel-ops`), or a selected-logprob provider (`--selected-logprob-provider`). The evidence
says what ran (harness.records.log_evidence reads it): RL-Kernel's `Using RL-Kernel <op> op: <impl>`
line, its fallback warnings and the per-step fallback counters it logs
(`train/rl_kernel_<op>_fallback_count_total` and `_delta`, `train/rl_kernel_<op>_fallback`, or the
older `train/rl_kernel_fallback_count`), the provider's `Selected-logprob provider active` line and
its `using native path` warning, and execution decision records. The candidate executed only when
each requested path shows it loaded, no step counted a fallback, and the baseline ran none of it.
A count that was never logged is "not checked": a fallback after start-up would go unseen.
"""

from __future__ import annotations

import math
import re

from harness.judge.candidate_execution import EXECUTED, NOT_CHECKED, NOT_EXECUTED, Execution
from harness.judge.decisions import fallbacks
from harness.records.log_evidence import LogEvidence
from harness.spec.flag_read import flag_value, is_on, text_flag

_FALLBACK_METRIC = re.compile(r"^train/rl_kernel_(?:(?P<op>\w+?)_)?fallback(?:_count(?:_total|_delta)?)?$")
_CALLS_METRIC = "train/rl_kernel_{op}_call_count_total"


def requested_ops(flags: dict) -> tuple[str, ...]:
    """The RL-Kernel operators a run asks for (none unless --enable-rl-kernel is on)."""
    if not is_on(flags, "enable-rl-kernel"):
        return ()
    value = flag_value(flags, "rl-kernel-ops")
    items = value if isinstance(value, list) else [] if value in (None, True, False) else [value]
    return tuple(sorted({op.strip() for item in items for op in re.split(r"[,\s]+", str(item).strip("()[]'\" ")) if op.strip(" '\"")}))


def requested_provider(flags: dict) -> str | None:
    provider = text_flag(flags, "selected-logprob-provider")
    return None if provider in (None, "None") else provider


def _fallback_steps(series: dict[str, list[tuple[int, float]]], op: str) -> tuple[list[str], list[int]]:
    """(the fallback metrics logged for `op`, the steps where one counted a fallback)."""
    names, steps = [], set()
    for name, points in series.items():
        found = _FALLBACK_METRIC.match(name)
        if not found or (found["op"] not in (None, op)):
            continue
        names.append(name)
        steps.update(n for n, value in points if isinstance(value, (int, float)) and (math.isnan(value) or value > 0))
    return sorted(names), sorted(steps)


def _rl_kernel_findings(op: str, candidate: LogEvidence, series: dict, steps_logged: list[int], evidence: dict) -> tuple[str, str] | None:
    """(status, why) when `op` did not run cleanly on the candidate; None when it did."""
    loaded = [e for e in candidate.ops_loaded if e.fields["op"] == op]
    fell_back = [e for e in candidate.fallbacks if e.fields["op"] == op]
    metadata_fallback = [e for e in candidate.runtime_metadata if e.fields["op"] == op and e.fields.get("fallback") == "True"]
    names, bad_steps = _fallback_steps(series, op)
    evidence[op] = {
        "loaded": [f"line {e.line}: {e.fields['implementation']}" for e in loaded],
        "fallback_lines": [f"line {e.line}: {e.fields['reason']}" for e in fell_back],
        "fallback_metrics": names,
        "steps_with_fallback": bad_steps[:10],
    }
    if fell_back:
        first = fell_back[0]
        return NOT_EXECUTED, f"RL-Kernel {op} fell back (log.txt line {first.line}): {first.fields['reason']}"
    if bad_steps:
        return NOT_EXECUTED, f"RL-Kernel {op} counted a fallback at train step(s) {', '.join(map(str, bad_steps[:5]))} ({', '.join(names)})"
    if metadata_fallback:
        return NOT_EXECUTED, f"RL-Kernel {op} reports fallback=True in its runtime metadata (log.txt line {metadata_fallback[0].line})"
    if not loaded:
        return NOT_EXECUTED, f"no 'Using RL-Kernel {op} op' line in the candidate's log: the operator never loaded"
    calls = series.get(_CALLS_METRIC.format(op=op), [])
    if calls and max(v for _, v in calls) <= 0:
        return NOT_EXECUTED, f"RL-Kernel {op} loaded but counted no call ({_CALLS_METRIC.format(op=op)} stays 0)"
    if not names:
        return (
            NOT_CHECKED,
            f"RL-Kernel {op} loaded ({loaded[0].fields['implementation']}) but the log has no fallback counter: a later fallback would be unseen",
        )
    covered = {n for name in names for n, _ in series[name]}
    missing = [s for s in steps_logged if s not in covered]
    if missing:
        return NOT_CHECKED, f"RL-Kernel {op}'s fallback counter is missing at train step(s) {', '.join(map(str, missing[:5]))}"
    return None


def judge_vime_execution(
    candidate_flags: dict,
    baseline_flags: dict,
    candidate: LogEvidence,
    baseline: LogEvidence,
    series: dict[str, list[tuple[int, float]]],
    steps_logged: list[int],
) -> Execution:
    """The verdict on one VIME candidate run. `series`: the candidate's train/rl_kernel_* metrics by
    name ([(step, value)]); `steps_logged`: its train steps."""
    ops = tuple(op for op in requested_ops(candidate_flags) if op not in requested_ops(baseline_flags))
    provider = requested_provider(candidate_flags)
    provider = provider if provider != requested_provider(baseline_flags) else None
    evidence: dict = {"requested_ops": list(ops), "requested_provider": provider}
    if not candidate.read:
        return Execution(NOT_CHECKED, f"candidate not checked: {candidate.problems[0]}", evidence)
    findings = []
    for op in ops:
        finding = _rl_kernel_findings(op, candidate, series, steps_logged, evidence)
        if finding:
            findings.append(finding)
        if any(e.fields["op"] == op for e in baseline.ops_loaded):
            findings.append((NOT_EXECUTED, f"the baseline loaded RL-Kernel {op} too: the pair does not differ in its operator path"))
    if provider:
        native = candidate.provider_native
        if native:
            findings.append(
                (
                    NOT_EXECUTED,
                    f"the selected-logprob provider fell back to the native path (log.txt line {native[0].line}): {native[0].fields['reason']}",
                )
            )
        elif not candidate.provider_active:
            findings.append((NOT_EXECUTED, f"no 'Selected-logprob provider active' line in the candidate's log: {provider} never ran"))
        evidence["provider_active"] = [f"line {e.line}: {e.fields['backend_id']} ({e.fields['contract_id']})" for e in candidate.provider_active]
    for record in fallbacks(candidate.decisions)[:3]:
        findings.append(
            (
                NOT_EXECUTED,
                f"an execution decision records a fallback (log.txt line {record['_line']}): requested {record.get('requested_backend')!r}, "
                f"ran {record.get('actual_backend')!r}, reason {record.get('fallback_reason')!r}",
            )
        )
    if not ops and not provider:
        if candidate.decisions:
            return Execution(
                EXECUTED if not findings else NOT_EXECUTED,
                "; ".join(w for _, w in findings) or "candidate executed: its execution decisions show no fallback",
                evidence,
            )
        return Execution(
            NOT_CHECKED,
            "candidate not checked: it asks for no RL-Kernel operator or selected-logprob provider the baseline lacks, and logs no execution decision",
            evidence,
        )
    if any(status == NOT_EXECUTED for status, _ in findings):
        return Execution(NOT_EXECUTED, "candidate not executed: " + "; ".join(w for s, w in findings if s == NOT_EXECUTED), evidence)
    if findings:
        return Execution(NOT_CHECKED, "candidate not checked: " + "; ".join(w for _, w in findings), evidence)
    ran = [f"RL-Kernel {op} ({evidence[op]['loaded'][0].split(': ', 1)[1]}, no fallback at any of {len(steps_logged)} train steps)" for op in ops]
    if provider:
        ran.append(f"selected-logprob provider {provider} ({evidence['provider_active'][0].split(': ', 1)[1]})")
    return Execution(EXECUTED, "candidate executed: " + "; ".join(ran), evidence)
