"""The drift budget: how much of a rung's drift each boundary carries, decided by intervention.

Evidence (harness.experiment.budget_scores gathers it): for each seed's run of the rung, every lever
setting's per-sequence gap d_i(S) = mean over sequence i's response tokens of |trainer - rollout|
(VIME's per-sample mean), on the run's own sampled tokens at the weights they were sampled with.
Settings: ``native`` (the run as it ran), ``all`` (every operator lever on), ``add:X`` (lever X alone)
and ``loo:X`` (every operator lever but X). Per lever X, as shares of the rung's drift D = mean d(native):

    add-one        A_X = (D - D(add:X)) / D          what aligning X alone removes
    leave-one-out  L_X = (D(loo:X) - D(all)) / D     what leaving X alone native brings back
    interaction    I_X = L_X - A_X                   what X's share depends on the other boundaries

Each is a ratio of means of paired per-sequence differences; its standard error is the public
estimator's (harness.judge.variance.side_estimate: seeds as replicates, each seed's sequences as
its series) applied to the linearised terms z_i = (x_i - share * d_i(native)) / D. The interval is share +/- t(df) x SE.

Localisation (the rung's "candidate operator" answer): the drift is localised to boundary X when
aligning X alone removes at least the pre-registered share q (knobs/levers.yaml
budget.min_localised_share) at thresholds.min_margin_se standard errors or more:
(A_X - q) / SE >= min_margin_se. A lever whose A_X sits that far below q is decided "not localised";
any other is inconclusive. The rung is localised to the lever with the largest such share, not
localised when every operator lever is decided so, and inconclusive otherwise. A contract lever
(the processed-logprob replay) is measured and reported, never an answer. q is a threshold of
knobs/thresholds.yaml, named by the lever table. This module opens no file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness.judge import stats, variance
from harness.judge.margin import Margin, bound_margin
from harness.spec import Knobs
from harness.spec.levers import LeverFile

NATIVE, ALL = "native", "all"
LOCALISED, NOT_LOCALISED, INCONCLUSIVE = "localised", "not localised", "inconclusive"


def add_key(lever: str) -> str:
    return f"add:{lever}"


def loo_key(lever: str) -> str:
    return f"loo:{lever}"


@dataclass(frozen=True)
class SeedScores:
    """One run's re-scored gaps: setting key -> per-sequence mean |trainer - rollout|."""

    run: str
    seed: int
    gaps: dict[str, np.ndarray]
    tokens: int
    rollouts: tuple[int, ...]
    # How the re-score at the run's own configuration reproduced its record, per side: tokens not
    # bitwise equal to what the run recorded, and the largest difference.
    replay: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """A share with its interval (share +/- t(df) x SE)."""

    value: float
    low: float
    high: float
    se: float
    df: float

    def text(self) -> str:
        return f"{self.value:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "se": self.se, "df": self.df}


@dataclass(frozen=True)
class LeverShare:
    lever: str
    boundary: str
    side: str
    kind: str
    add: Estimate
    loo: Estimate | None  # None for a contract lever (never in the all-levers set)
    interaction: Estimate | None
    localisation: str | None  # localised | not localised | inconclusive (operator levers only)
    margin: Margin | None  # of the add-one share against the pre-registered share
    by_seed: dict[int, dict] = field(default_factory=dict)  # seed -> {"add": Estimate, "loo": Estimate | None}

    def as_dict(self) -> dict:
        return {
            "lever": self.lever,
            "boundary": self.boundary,
            "side": self.side,
            "kind": self.kind,
            "add_one": self.add.as_dict(),
            "leave_one_out": self.loo.as_dict() if self.loo else None,
            "interaction": self.interaction.as_dict() if self.interaction else None,
            "localisation": self.localisation,
            "margin": self.margin.as_dict() if self.margin else None,
            "by_seed": {str(s): {k: (v.as_dict() if v else None) for k, v in d.items()} for s, d in self.by_seed.items()},
        }


@dataclass(frozen=True)
class RungBudget:
    """The drift budget of one rung over its seeds, and its localisation by intervention."""

    rung: str
    runs: tuple[str, ...]
    seeds: tuple[int, ...]
    drift: float  # D: mean over seeds of the runs' mean per-sequence gap (native)
    drift_se: float
    residual: Estimate  # D(all) / D: what every operator lever together leaves
    levers: tuple[LeverShare, ...]
    verdict: str  # localised | not localised | inconclusive
    boundary: str | None  # the lever localised to (its name), when localised
    min_share: float
    min_margin_se: float
    sequences: int
    tokens: int
    replay: dict
    reason: str = ""

    def summary(self) -> str:
        return f"drift budget of {self.rung}: {self.reason}"

    def lever(self, name: str) -> LeverShare:
        return next(row for row in self.levers if row.lever == name)

    def text(self) -> str:
        """The budget as a plain table: one line per lever, add-one, leave-one-out and their interaction."""
        lines = [
            f"drift budget of {self.rung}: drift {self.drift:.4g} (SE {self.drift_se:.2g}) over seeds {', '.join(map(str, self.seeds))} "
            f"({self.sequences} sequences, {self.tokens} tokens); all operator levers leave {self.residual.text()}",
            f"{'lever':30} {'add-one':26} {'leave-one-out':26} {'interaction':26} localisation",
        ]
        for row in self.levers:
            loo = row.loo.text() if row.loo else ("- (contract)" if row.kind != "operator" else "- (not scored)")
            interaction = row.interaction.text() if row.interaction else "-"
            where = f"{row.localisation} ({row.margin.se_units:+.1f} SE from {self.min_share:.0%})" if row.margin else "never an answer"
            lines.append(f"{row.lever:30} {row.add.text():26} {loo:26} {interaction:26} {where}")
        lines.append(f"verdict: {self.reason}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "rung": self.rung,
            "runs": list(self.runs),
            "seeds": list(self.seeds),
            "drift": self.drift,
            "drift_se": self.drift_se,
            "residual_all_levers": self.residual.as_dict(),
            "levers": [row.as_dict() for row in self.levers],
            "verdict": self.verdict,
            "boundary": self.boundary,
            "min_localised_share": self.min_share,
            "min_margin_se": self.min_margin_se,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "replay": self.replay,
            "reason": self.reason,
            "measured_at": "the rung's own sampled tokens, at the weights they were sampled with (re-scored; no new rollouts)",
        }


class BudgetInputError(ValueError):
    """Scores that cannot be budgeted: the message names what is missing."""


# ---------------------------------------------------------------- the numbers
def paired_interval(by_seed: list[np.ndarray], confidence: float) -> stats.DiffCI:
    """The mean (over seeds, of each seed's mean) of paired per-sequence values, with the judge's one
    estimator's interval (harness.judge.variance: the seeds' spread and each seed's batch-means SE)."""
    side = variance.side_estimate(by_seed, name="paired values")
    return stats.DiffCI.around(side.mean, side.se, side.df, confidence, max(side.batches), max(side.batches))


def _share(numerators: list[np.ndarray], natives: list[np.ndarray], confidence: float) -> Estimate:
    """sum-of-seed-means ratio mean(x) / mean(d_native), its SE by linearisation."""
    drift = float(np.mean([d.mean() for d in natives]))
    value = float(np.mean([x.mean() for x in numerators])) / drift
    linear = [(x - value * d) / drift for x, d in zip(numerators, natives)]
    ci = paired_interval(linear, confidence)
    half = (ci.high - ci.low) / 2
    return Estimate(value, value - half, value + half, ci.se, ci.df)


def _gaps(seeds: list[SeedScores], key: str) -> list[np.ndarray]:
    missing = [s.run for s in seeds if key not in s.gaps]
    if missing:
        raise BudgetInputError(f"setting {key!r} was not scored on {', '.join(missing)}")
    return [np.asarray(s.gaps[key], dtype=float) for s in seeds]


def _localise(add_removed: list[np.ndarray], natives: list[np.ndarray], share: Estimate, q: float, need: float, confidence: float):
    """The add-one share against q: its margin in SE, and the lever's verdict."""
    drift = float(np.mean([d.mean() for d in natives]))
    excess = paired_interval([(x - q * d) / drift for x, d in zip(add_removed, natives)], confidence)
    margin = bound_margin(share.value, excess.se, q, upper=False, sample={"seeds": len(natives), "sequences": int(sum(len(d) for d in natives))})
    if margin.se_units >= need:
        return LOCALISED, margin
    if math.isfinite(margin.se_units) and margin.se_units <= -need:
        return NOT_LOCALISED, margin
    return INCONCLUSIVE, margin


def judge_budget(rung: str, seeds: list[SeedScores], levers: LeverFile, knobs: Knobs) -> RungBudget:
    """The rung's drift budget and localisation from its seeds' re-scored gaps (numbers in, verdict out)."""
    if not seeds:
        raise BudgetInputError(f"{rung}: no re-scored run to budget")
    confidence = knobs.threshold("bootstrap_confidence")
    q = knobs.threshold(levers.budget.min_localised_share.threshold)
    need = knobs.threshold("min_margin_se")
    natives, everything = _gaps(seeds, NATIVE), _gaps(seeds, ALL)
    drift_ci = paired_interval(natives, confidence)
    if not drift_ci.diff > 0:
        raise BudgetInputError(f"{rung}: the runs' drift is {drift_ci.diff:.3g}; a budget needs a drift to share out")
    residual = _share(everything, natives, confidence)
    # scored without leave-one-out settings at all (a control's test: the localisation reads add-one only);
    # scored with them, every one must be there (_gaps names the one missing)
    leave_one_out = any(key.startswith(loo_key("")) for s in seeds for key in s.gaps)
    rows = []
    for name, lever in levers.levers.items():
        added = _gaps(seeds, add_key(name))
        removed = [d - a for d, a in zip(natives, added)]
        add = _share(removed, natives, confidence)
        by_seed = {s.seed: {"add": _share([r], [d], confidence)} for s, r, d in zip(seeds, removed, natives)}
        loo = interaction = None
        verdict = margin = None
        if lever.kind == "operator":
            if leave_one_out:
                returned = [lo - al for lo, al in zip(_gaps(seeds, loo_key(name)), everything)]
                loo = _share(returned, natives, confidence)
                interaction = _share([r - m for r, m in zip(returned, removed)], natives, confidence)
                for s, r, d in zip(seeds, returned, natives):
                    by_seed[s.seed]["loo"] = _share([r], [d], confidence)
            verdict, margin = _localise(removed, natives, add, q, need, confidence)
        rows.append(LeverShare(name, lever.boundary, lever.side, lever.kind, add, loo, interaction, verdict, margin, by_seed))
    verdict, boundary, reason = _rung_verdict(rows, q, need)
    return RungBudget(
        rung=rung,
        runs=tuple(s.run for s in seeds),
        seeds=tuple(s.seed for s in seeds),
        drift=drift_ci.diff,
        drift_se=drift_ci.se,
        residual=residual,
        levers=tuple(rows),
        verdict=verdict,
        boundary=boundary,
        min_share=q,
        min_margin_se=need,
        sequences=int(sum(len(d) for d in natives)),
        tokens=int(sum(s.tokens for s in seeds)),
        replay={s.run: s.replay for s in seeds},
        reason=reason,
    )


def _rung_verdict(rows: list[LeverShare], q: float, need: float) -> tuple[str, str | None, str]:
    operators = [row for row in rows if row.kind == "operator"]
    localised = sorted((row for row in operators if row.localisation == LOCALISED), key=lambda row: -row.add.value)
    if localised:
        best = localised[0]
        others = f"; also {', '.join(row.lever for row in localised[1:])}" if localised[1:] else ""
        return (
            LOCALISED,
            best.lever,
            f"localised to {best.lever} ({best.boundary}): aligning it alone removes {best.add.text()} of the drift, "
            f"{best.margin.se_units:+.1f} SE past the pre-registered {q:.0%} (needs {need:g}){others}",
        )
    open_rows = [row for row in operators if row.localisation == INCONCLUSIVE]
    top = max(operators, key=lambda row: row.add.value)
    if open_rows:
        return (
            INCONCLUSIVE,
            None,
            f"inconclusive: {', '.join(row.lever for row in open_rows)} not decided against the pre-registered {q:.0%} "
            f"at {need:g} SE (largest add-one share {top.lever} {top.add.text()})",
        )
    return (
        NOT_LOCALISED,
        None,
        f"not localised: no boundary alone removes {q:.0%} of the drift (largest add-one share {top.lever} {top.add.text()}, "
        f"{top.margin.se_units:+.1f} SE from {q:.0%})",
    )


# ---------------------------------------------------------------- the answer against its expectation
def answer_margin(budget: RungBudget) -> Margin | None:
    """The rung's answer's margin: how many SE its deciding share sits from the pre-registered one, on
    the side of the answer (the decision itself asks for min_margin_se of them, so an answer past its
    decision is never flagged); for "not localised", the lever nearest to being localised."""
    operators = [row for row in budget.levers if row.kind == "operator" and row.margin is not None]
    if not operators:
        return None
    if budget.verdict == LOCALISED:
        row = budget.lever(budget.boundary)
        units = row.margin.se_units
    else:
        row = max(operators, key=lambda r: r.margin.se_units)  # the nearest to (or past) the share
        units = -row.margin.se_units
    sample = {**row.margin.sample, "lever": row.lever}
    return Margin(units, row.add.value, budget.min_share, row.margin.se, budget.verdict, sample, 0.0)


def expectation_findings(budget, expected) -> list[str]:
    """What differs between the rung's budget (RungBudget or not measured) and its pre-registered
    answer (knobs/levers.yaml budget.expect; None: nothing expected): the levers it rules out, then
    the rung's verdict unless that is reported. Empty: as expected."""
    if expected is None or (expected.verdict == "reported" and not expected.ruled_out):
        return []
    if not isinstance(budget, RungBudget):
        return [f"drift budget not measured: {getattr(budget, 'reason', budget)}"]
    findings = []
    for name in expected.ruled_out:
        row = budget.lever(name)
        if row.localisation != NOT_LOCALISED:
            findings.append(
                f"expected {name} ruled out (not localised), got {row.localisation}: aligning it alone removes {row.add.text()}, "
                f"{row.margin.se_units:+.1f} SE from {budget.min_share:.0%} (needs -{budget.min_margin_se:g})"
            )
    if findings or expected.verdict == "reported":
        return findings
    if budget.verdict != expected.verdict:
        return [f"expected {expected.verdict}{f' to {expected.boundary}' if expected.boundary else ''}, got {budget.reason}"]
    # localised to the expected lever: the verdict's boundary (the largest share) or another past the share
    localised = {row.lever for row in budget.levers if row.localisation == LOCALISED}
    if expected.boundary is not None and expected.boundary not in localised:
        return [f"expected localised to {expected.boundary}, got {budget.reason}"]
    return []
