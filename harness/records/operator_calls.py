"""``operator_calls.json``: the selected-log-prob operator calls each engine counted at run time.

Written by the embedded trainer after every rollout (harness/embedded/operator_calls.py): what
the run's flags asked each side to run (``expected``: side, pass, operator) and what was counted
inside the calls (``trainer`` in the trainer's process; ``rollout`` in the process that ran
vLLM's sampler, read back from the engine's worker). A VIME run writes none: its counts are not
measured, never assumed.

    {"format": "vime-mismatch-lab/operator-calls-v1", "rollouts_counted": 4, "engine_mode": "...",
     "expected": [{"side": "trainer", "pass": "recompute", "operator": "fused-linear-logprob"}, ...],
     "trainer": {"process": 123, "passes": {"recompute": {"fused-linear-logprob": {"calls": 4, "tokens": 2688}}, ...}},
     "rollout": {"process": 456, "passes": {"sampler": {...}, "capture": {...}}} | null,
     "problems": ["..."]}
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.records.runload import read_json

FILE = "operator_calls.json"
FORMAT = "vime-mismatch-lab/operator-calls-v1"


class Count(BaseModel):
    model_config = ConfigDict(extra="forbid")
    calls: int = Field(ge=0)
    tokens: int = Field(ge=0)


class SideCounts(BaseModel):
    """One side's counts: pass -> operator -> calls and tokens, and the process that counted them."""

    model_config = ConfigDict(extra="forbid")
    process: int | None = None
    passes: dict[str, dict[str, Count]] = Field(default_factory=dict)

    def count(self, pass_: str, operator: str) -> Count:
        return self.passes.get(pass_, {}).get(operator) or Count(calls=0, tokens=0)


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    side: str
    pass_: str = Field(alias="pass")
    operator: str


class OperatorCalls(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str
    expected: list[Expected]
    trainer: SideCounts | None = None
    rollout: SideCounts | None = None
    engine_mode: str | None = None
    tp_rank: int = 0
    rollouts_counted: int = Field(ge=0)
    problems: list[str] = Field(default_factory=list)

    def side(self, name: str) -> SideCounts | None:
        return {"trainer": self.trainer, "rollout": self.rollout}.get(name)


def read_operator_calls(run_path: Path) -> tuple[OperatorCalls | None, str | None]:
    """(the counts, None) or (None, one line: the file, the key, what was expected)."""
    path = Path(run_path) / FILE
    raw, problem = read_json(path, dict)
    if problem:
        return None, f"{path}: missing (the run recorded no operator counts)" if problem.endswith(": missing") else problem
    if raw.get("format") != FORMAT:
        return None, f"{path}: key 'format': expected {FORMAT!r}, found {raw.get('format')!r}"
    try:
        return OperatorCalls(**raw), None
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        return None, f"{path}: key {key!r}: {first['msg']} (found {first.get('input')!r})"
