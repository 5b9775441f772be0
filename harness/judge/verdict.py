"""What a check returns: passed or not, one message a reviewer can act on, and its evidence.

Messages name the step, the value and the threshold (by its knobs/ name), so a failing test reads
as a finding rather than an assertion error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The series windows live with the records (attribution reads them too, and it never imports the judge).
from harness.records.series_window import after_warmup, finite_values  # noqa: F401 - re-exported for the judge's modules


@dataclass
class Verdict:
    passed: bool
    message: str
    evidence: dict = field(default_factory=dict)
