"""What a VIME log says besides its metric records: which log-prob operator ran, and how much GPU
memory and KV cache the run used. Read from log.txt in one pass; the judge's candidate-executed
check and the A/B's performance half take the typed result.

Lines read, each as RL-Align's VIME writes it (RL-Align/vime, commits as read):
- `Using RL-Kernel linear_logp op: FusedLinearLogpSM90Op` (and `... logp op: ...`), logged once when
  the operator loads (vime/backends/megatron_utils/rl_kernel.py@0cd0135 `_get_linear_logp_op`);
- `Falling back to vime logprob path because RL-Kernel linear_logp is unavailable: REASON`
  (same file, `_warn_fallback`; logged once per distinct reason);
- `RL-Kernel linear_logp runtime_metadata: requested_backend=... actual_backend=... fallback=...`
  (vime/backends/megatron_utils/model.py@0cd0135, per train step);
- `Selected-logprob provider active: backend_id=... contract_id=...` and `Selected-logprob provider
  P is unavailable; using native path: REASON`
  (vime/backends/megatron_utils/selected_logprob_provider.py@3f3724f);
- `rl_kernel.execution_decision {json}` (the execution decision records; emit_execution_decision);
- `[Rank R] Memory-Usage MSG: {'total_GB': .., 'used_GB': .., 'allocated_GB': .., 'reserved_GB': ..}`
  (vime/utils/memory_utils.py@8f1ccf6 `print_memory`);
- vLLM's periodic engine statistics, `... Avg generation throughput: X tokens/s, ... GPU KV cache
  usage: Y%` (vllm/v1/metrics/loggers.py `LoggingStatLogger.log`).
A memory or KV-cache line belongs to the rollout in progress when it was printed: the one after the
last rollout whose trainer-side `perf N` record (the one with perf/train_time or perf/step_time,
printed at the end of a rollout) came before it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from harness.records.lineclean import clean_line
from harness.records.pyliteral import LiteralSyntaxError, parse_dict

_OP_LOADED = re.compile(r"Using RL-Kernel (?P<op>\w+) op: (?P<impl>\S+)")
_FALLBACK = re.compile(r"Falling back to vime logprob path because RL-Kernel (?P<op>\w+) is unavailable: (?P<reason>.*)$")
_RUNTIME = re.compile(r"RL-Kernel (?P<op>\w+) runtime_metadata: (?P<fields>.*)$")
_PROVIDER_ACTIVE = re.compile(r"Selected-logprob provider active: backend_id=(?P<backend>\S+) contract_id=(?P<contract>\S+)")
_PROVIDER_NATIVE = re.compile(r"Selected-logprob provider (?P<path>\S+) is unavailable; using native path: (?P<reason>.*)$")
_DECISION = re.compile(r"rl_kernel\.execution_decision\s+(\{.*\})\s*$")
_MEMORY = re.compile(r"\[Rank (?P<rank>\d+)\] Memory-Usage (?P<what>.*?): (?P<payload>\{.*\})\s*$")
_KV_CACHE = re.compile(r"(?P<device>\w+) KV cache usage: (?P<pct>[\d.]+)%")
_GENERATION = re.compile(r"Avg generation throughput: (?P<value>[\d.]+) tokens/s")
_RECORD = re.compile(r"^(?P<kind>perf) (?P<n>-?\d+): (?P<payload>\{.*)$")
_KEY_VALUE = re.compile(r"(\w+)=(\S+)")
# Keys of a trainer-side perf record (the end of a rollout on the trainer).
_TRAINER_PERF_KEYS = ("'perf/train_time'", "'perf/step_time'")


@dataclass(frozen=True)
class EvidenceLine:
    """One line of evidence: where it is (1-based line of log.txt), who printed it, what it says."""

    line: int
    source: str | None
    fields: dict


@dataclass
class LogEvidence:
    """Everything the scan found, in log order. `problems` lists lines that looked like evidence but
    did not parse (an execution decision that is not JSON)."""

    ops_loaded: list[EvidenceLine] = field(default_factory=list)
    fallbacks: list[EvidenceLine] = field(default_factory=list)
    runtime_metadata: list[EvidenceLine] = field(default_factory=list)
    provider_active: list[EvidenceLine] = field(default_factory=list)
    provider_native: list[EvidenceLine] = field(default_factory=list)
    decisions: list[dict] = field(default_factory=list)
    memory: list[EvidenceLine] = field(default_factory=list)
    kv_cache: list[EvidenceLine] = field(default_factory=list)
    generation_throughput: list[EvidenceLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    read: bool = True  # False: there was no log to read


def _memory_fields(payload: str) -> dict | None:
    try:
        values = parse_dict(payload)
    except LiteralSyntaxError:
        return None
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def scan_lines(lines) -> LogEvidence:
    """The evidence in an iterable of raw log lines."""
    evidence = LogEvidence()
    finished_rollout = -1  # the last rollout whose trainer-side perf record was printed
    for number, raw in enumerate(lines, 1):
        if "\x00" in raw:
            break
        line = clean_line(raw)
        message, source = line.message, line.source
        record = _RECORD.match(message)
        if record:
            if any(key in message for key in _TRAINER_PERF_KEYS):
                finished_rollout = max(finished_rollout, int(record.group("n")))
            continue
        rollout = finished_rollout + 1
        if found := _OP_LOADED.search(message):
            evidence.ops_loaded.append(EvidenceLine(number, source, {"op": found["op"], "implementation": found["impl"]}))
        elif found := _FALLBACK.search(message):
            evidence.fallbacks.append(EvidenceLine(number, source, {"op": found["op"], "reason": found["reason"].strip()}))
        elif found := _RUNTIME.search(message):
            evidence.runtime_metadata.append(EvidenceLine(number, source, {"op": found["op"], **dict(_KEY_VALUE.findall(found["fields"]))}))
        elif found := _PROVIDER_ACTIVE.search(message):
            evidence.provider_active.append(EvidenceLine(number, source, {"backend_id": found["backend"], "contract_id": found["contract"]}))
        elif found := _PROVIDER_NATIVE.search(message):
            evidence.provider_native.append(EvidenceLine(number, source, {"provider": found["path"], "reason": found["reason"].strip()}))
        elif found := _DECISION.search(message):
            try:
                decision = json.loads(found.group(1))
            except json.JSONDecodeError as err:
                evidence.problems.append(f"log.txt line {number}: execution decision is not valid JSON ({err.msg})")
                continue
            if isinstance(decision, dict):
                evidence.decisions.append({**decision, "_line": number})
        elif found := _MEMORY.search(message):
            values = _memory_fields(found["payload"])
            if values is not None:
                evidence.memory.append(
                    EvidenceLine(number, source, {"rank": int(found["rank"]), "what": found["what"], "rollout": rollout, **values})
                )
        else:
            if found := _KV_CACHE.search(message):
                evidence.kv_cache.append(
                    EvidenceLine(number, source, {"device": found["device"], "percent": float(found["pct"]), "rollout": rollout})
                )
            if found := _GENERATION.search(message):
                evidence.generation_throughput.append(EvidenceLine(number, source, {"tokens_per_s": float(found["value"]), "rollout": rollout}))
    return evidence


@lru_cache(maxsize=32)
def _scan_file(path: Path, mtime: float, size: int) -> LogEvidence:
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        return scan_lines(handle)


def read_log_evidence(run_path: Path) -> LogEvidence:
    """The evidence in a run directory's log.txt (scanned once per file version)."""
    path = Path(run_path) / "log.txt"
    if not path.is_file():
        return LogEvidence(problems=[f"{path}: no log to read"], read=False)
    stat = path.stat()
    return _scan_file(path, stat.st_mtime, stat.st_size)


def per_rollout_max(lines: list[EvidenceLine], key: str) -> list[tuple[int, float]]:
    """[(rollout, the largest `key` printed during it)], by rollout."""
    peaks: dict[int, float] = {}
    for entry in lines:
        value = entry.fields.get(key)
        if isinstance(value, float):
            rollout = entry.fields["rollout"]
            peaks[rollout] = max(peaks.get(rollout, value), value)
    return sorted(peaks.items())


def per_rollout_mean(lines: list[EvidenceLine], key: str) -> list[tuple[int, float]]:
    """[(rollout, the mean of `key` over the lines printed during it)], by rollout."""
    sums: dict[int, list[float]] = {}
    for entry in lines:
        value = entry.fields.get(key)
        if isinstance(value, float):
            sums.setdefault(entry.fields["rollout"], []).append(value)
    return sorted((rollout, sum(values) / len(values)) for rollout, values in sums.items())
