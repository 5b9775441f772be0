"""The evidence a ladder judgement rests on, as typed objects gathered before judging.

The judge (harness.judge.ladder) takes these and numbers and returns a verdict; it never runs a
probe, launches a run or calls back into its caller. Who gathers them (harness.experiment.evidence:
the attribution probes on the runs' dumps, the paired scorer, the replay run) is not its business.
Where the judge reaches a step whose evidence is not in hand (which run's probe 6, which rung's
replay run, is only known once the delta's direction is), its judgement lists what it needs
(`RungJudgement.needs`) and the gatherer judges again with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.records.runload import Run


@dataclass(frozen=True)
class FrameworkResult:
    """Probes 1-2 (sample and token identity, weight version) on one run."""

    failed: tuple[str, ...] = ()  # the failed probes' messages: empty when sample identity and weights agree
    not_checked: tuple[str, ...] | None = None  # the probes that could not run; None: nobody said which ran


@dataclass(frozen=True)
class ContractResult:
    """Probe 6 (the sampling contract) on one run's dumps: status pass | fail | not checked."""

    status: str
    verdict: str


@dataclass(frozen=True)
class BoundaryResult:
    """One run's boundary table: status within | breaks | not checked, why, and the boundary it localises."""

    status: str
    verdict: str
    boundary: str | None = None


@dataclass(frozen=True)
class BudgetNotMeasured:
    """A rung whose drift budget could not be measured, and why (never a pass)."""

    reason: str


@dataclass(frozen=True)
class Need:
    """Evidence a judgement reached without: kind contract | boundary (key: a run id), replay or
    budget (key: a rung id)."""

    kind: str
    key: str


@dataclass
class RungEvidence:
    """What one rung is judged on besides its runs' series."""

    # The framework probes per run id of every run judged; None: no framework probe was given, so
    # framework drift is neither found nor ruled out.
    framework: dict[str, FrameworkResult] | None = None
    paired: object | None = None  # harness.judge.paired.PairedDelta or NotChecked; None: not asked
    contract: dict[str, ContractResult] = field(default_factory=dict)  # by run id, for the runs a step needed
    boundary: dict[str, BoundaryResult] = field(default_factory=dict)  # by run id
    replay: dict[str, Run] = field(default_factory=dict)  # rung id -> its run replaying the processed contract
    # rung id -> its drift budget (harness.judge.budget.RungBudget) or BudgetNotMeasured: the
    # intervention that decides candidate-operator drift (the boundary table is its second witness)
    budget: dict[str, object] = field(default_factory=dict)
    # Whether probe 6 and the boundary table can be had at all; without them a step that needs one
    # says "not checked" (never a pass) instead of asking for it.
    contract_probe: bool = True
    boundary_table: bool = True
    drift_budget: bool = True
