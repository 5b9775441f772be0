"""knobs/sweep_ledger.yaml, typed: every seed offset a confirmatory sweep has judged the main job at.

An offset judged once is spent: judging it again after a change (more pairs, another threshold) would
let the same seeds confirm what they already failed (optional stopping). `python -m harness sweep`
refuses an offset this ledger holds, writes each offset here as it starts (a killed sweep's offsets
are spent too) and its result when it ends; the file is committed with the result.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ConfigDict, Field

from harness.spec.load import parse_file
from harness.spec.schema import Strict

LEDGER_FILE = "sweep_ledger.yaml"


class Documented(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SpentOffset(Documented):
    offset: int
    """The offset on the judging seed (pytest --seed-offset, python -m harness judge --seed-offset)."""
    seeds: list[int] = Field(min_length=2, max_length=2)
    """The first and last seed the main job judged at this offset."""
    sweep: str
    """Which sweep spent it: its date and commit, or the docs/results.md section that reports it."""
    expectations_sha256: str | None = None
    """The pre-registration it was judged against (harness.judge.preregistration); None before hashing existed."""
    result: str = "started"
    """started (the sweep did not finish it), or what the offset showed."""


class Ledger(Documented):
    spent: list[SpentOffset] = Field(default_factory=list)

    def offsets(self) -> set[int]:
        return {entry.offset for entry in self.spent}


def load_ledger(knobs_dir: Path) -> Ledger:
    path = Path(knobs_dir) / LEDGER_FILE
    return parse_file(path, Ledger) if path.exists() else Ledger()


def write_ledger(knobs_dir: Path, ledger: Ledger) -> Path:
    """Rewrite the ledger below its comment header (the header is kept as written)."""
    path = Path(knobs_dir) / LEDGER_FILE
    text = path.read_text() if path.exists() else ""
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    body = yaml.safe_dump(ledger.model_dump(), sort_keys=False, width=110)
    path.write_text(header + body)
    return path
