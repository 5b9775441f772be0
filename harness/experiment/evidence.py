"""The ladder's evidence, gathered from runs for the judge (harness.judge.ladder decides).

The judge takes numbers and evidence; this module is where the evidence comes from: the rung's
and its parent's runs at every replicate seed, the framework probes (1-2) and the sampling-contract
probe (6) on their dumps and the boundary table (harness.attribution), the paired per-token delta
(harness.judge.paired's numbers on scores from the scorer process), and the replay run. Each probe
runs once per run per process: a parent rung is judged by several children.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.judge import ladder
from harness.records.runload import Run
from harness.spec import Knobs


@dataclass
class Probes:
    """The attribution probes the ladder's evidence comes from, each run once per run id."""

    knobs: Knobs
    _framework: Callable | None = None
    _contract: dict = field(default_factory=dict)
    _boundary: dict = field(default_factory=dict)

    def framework_messages(self, run: Run) -> tuple[list[str], list[str]]:
        """(failed, not checked) messages of probes 1 (sample/token identity) and 2 (model state)."""
        if self._framework is None:
            from harness.attribution.probes import cached_framework_messages

            self._framework = cached_framework_messages()
        return self._framework(run)

    def framework_checks(self, run: Run) -> list[str]:
        return self.framework_messages(run)[0]

    def framework_not_checked(self, run: Run) -> list[str]:
        return self.framework_messages(run)[1]

    def contract_check(self, run: Run) -> tuple[str, str]:
        """Probe 6 (sampling contract) on the run's dumps: (status, verdict)."""
        if run.id not in self._contract:
            from harness.attribution.probes import contract_check

            verdict = contract_check(run, self.knobs)
            self._contract[run.id] = (verdict.status, verdict.verdict)
        return self._contract[run.id]

    def boundary_check(self, run: Run) -> tuple[str, str, str | None]:
        """The run's boundary table: (status within | breaks | not checked, reason, boundary)."""
        if run.id not in self._boundary:
            from harness.attribution.boundaries import boundary_status

            self._boundary[run.id] = boundary_status(run, self.knobs)
        return self._boundary[run.id]


def paired_for(backend: str, knobs: Knobs) -> Callable | None:
    """The paired per-token delta (child, parent) -> PairedDelta | NotChecked, on the embedded backend only."""
    if backend != "embedded":
        return None
    from harness.judge.paired import paired_delta

    return lambda child, parent: paired_delta(child, parent, knobs)


def judge_ladder_rung(rung, knobs: Knobs, fetch: Callable[..., Run], probes: Probes, *, holm, replicates: int, backend: str):
    """One rung judged against its parent with every piece of evidence the judge can use."""
    return ladder.judge_rung(
        rung,
        knobs,
        fetch,
        probes.framework_checks,
        holm,
        probes.contract_check,
        replicates=replicates,
        paired=paired_for(backend, knobs),
        boundary_check=probes.boundary_check,
        framework_not_checked=probes.framework_not_checked,
    )
