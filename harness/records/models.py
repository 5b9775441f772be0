"""The shapes the records layer hands out: one logged record, one failure signature, one parse.

These are the only types other parts of the harness see from a log; everything else in
harness.records turns text, event files or dumps into them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RecordKind = Literal["step", "rollout", "perf", "eval"]
RECORD_KINDS: tuple[str, ...] = ("step", "rollout", "perf", "eval")

FailureSignature = Literal[
    "nccl-error",
    "cuda-illegal-memory-access",
    "cuda-oom",
    "engine-dead",
    "connection-refused",
    "http-error",
    "timeout",
    "python-traceback",
    "ray-actor-died",
    # Written by the launcher, not found in logs: the trainer exited non-zero with no signature
    # in its output, or could not be started at all.
    "nonzero-exit",
    "launch-error",
]

MetricValue = float | int | str | None


class Record(BaseModel):
    """One `step N: {...}` / `rollout N: {...}` / `perf N: {...}` / `eval N: {...}` line.

    `line` is 1-based in the text it came from (log.txt for a run, metrics.jsonl when read back
    from a run directory, 0 for records that came from TensorBoard events or dumps); `source` is
    the Ray actor that printed it (e.g. "MegatronTrainRayActor pid=1234"), None without a prefix.
    """

    kind: RecordKind
    n: int
    metrics: dict[str, MetricValue]
    line: int = 0
    source: str | None = None

    def to_json_dict(self) -> dict:
        """The metrics.jsonl shape: exactly kind, n and metrics."""
        return {"kind": self.kind, "n": self.n, "metrics": self.metrics}


class Failure(BaseModel):
    """A failure signature seen in the log, with the line that shows it."""

    signature: FailureSignature
    line: int
    text: str


class ParseResult(BaseModel):
    """Everything one log yields. `stopped_at` is the line where parsing had to stop (a truncated
    last record, or binary data), None when the whole input was read."""

    records: list[Record] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    stopped_at: int | None = None
    warnings: list[str] = Field(default_factory=list)
    # The warnings that mean the input itself is damaged (truncated, binary, malformed, mixed);
    # `harness ingest` exits 2 when there are any, after keeping every readable record.
    bad_input: list[str] = Field(default_factory=list)
    lines_read: int = 0
    # Python logging's timestamps of the first and last prefixed line (the run's span, as logged).
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    # The run's arguments as the driver printed them at start (Megatron's `_print_args` block),
    # name -> value text as printed, and the line of each; empty when the log has no such print.
    arguments: dict[str, str] = Field(default_factory=dict)
    argument_lines: dict[str, int] = Field(default_factory=dict)
    # Where the run's metrics also went, as W&B's banner lines name it: wandb_dir, wandb_url,
    # wandb_project_url (environment.tracking_record makes the environment record's entry of it).
    tracking: dict[str, str] = Field(default_factory=dict)
    # The nodes that ran the job, as they described themselves (`LAB_PROVENANCE {json}` lines,
    # harness.launch.node_probe), in log order.
    provenance: list[dict] = Field(default_factory=list)

    def argument_int(self, name: str) -> int | None:
        """A printed argument read as an integer; None when absent or printed as None / non-integer."""
        try:
            return int(self.arguments[name])
        except (KeyError, ValueError):
            return None

    def steps(self) -> list[int]:
        return sorted({r.n for r in self.records if r.kind == "step"})

    def last_step(self) -> Record | None:
        steps = [r for r in self.records if r.kind == "step"]
        return steps[-1] if steps else None
