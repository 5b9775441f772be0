"""The seed's seven attribution probes on a finished run, and the drift class they decide.

    1 sample and token identity      dumps: rollout side vs trainer side, field by field
    2 model state                    dumps: a digest of the weights each engine holds, per step
    3 pre-softmax logits             probe bundle: selected logits per side's precision policy vs fp64
    4 log-sum-exp vs selected logit  probe bundle: the same error, split
    5 vocab-parallel reduce          probe bundle: TP merge vs full-vocabulary reduce
    6 sampling contract              probe bundle (+ dumps): top-k/top-p sets, processed vs raw, T
    7 paths on fixed tokens          probe bundle: the operator registry's paths side by side

Each probe's status is pass, fail, "not checked" (it could not run: no field on both sides, no
probe bundle, a bundle that does not reproduce itself) or "not measured" (computed from what the run
declared, or a boundary the run never crossed); neither of the last two is ever a pass. Each verdict
carries its `basis`: what it was computed from (values the run's engines recorded, the run's
declarations, or nothing); a pass or a fail stands only on recorded values (ProbeVerdict checks it).

Decision (the seed's guardrail: rule out framework and semantic causes before blaming arithmetic):
framework probes 1, 2 decide first, then the semantic probe 6, then the numerical probes 3, 4, 5, 7
in order; the first that fails decides. A failed framework or contract probe is a finding on its
own. A numerical class needs 1, 2 and 6 to have passed and every numerical probe before the failing
one to have been checked: the boundary is `expected-numerical` when it is a side's declared reduced
precision (bf16/fp16 logits, FP8), else `candidate-operator`. No failure: `none` only when every
probe was checked (probe 5 on a TP=1 run is "not checked" but not applicable: no merge ran, it
blocks no class). Otherwise the class is `undecided` and the report names what it needs
("undecided: needs probe 6 (...)").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, model_validator

from harness.attribution.consistency import compare_run
from harness.attribution.probe_run import RunSettings, run_settings
from harness.attribution.run_dumps import RunDumps, read_run_dumps
from harness.records.runload import Run
from harness.spec.load import Knobs
from harness.spec.schema import DriftClass

NOT_CHECKED = "not checked"  # the probe could not run or its bundles disagree; never counted as a pass
# Computed from what a run declared (dtypes, simulated LM-head paths, the registry's paths), not from
# both engines' own tensors: shown as evidence, never a pass or a fail, never deciding a class.
NOT_MEASURED = "not measured"
Status = Literal["pass", "fail", "not checked", "not measured"]
# Probes 3, 4 and 7 recompute each side's LM head from the trainer's hidden states at the side's
# declared dtype (and the registry's paths on them): neither engine's own logits. The boundary
# table (harness.attribution.boundaries) measures those boundaries from both engines' tensors.
FROM_DECLARATIONS = {
    3: "each side's LM-head path is simulated at its declared dtype on the trainer's hidden states",
    4: "the log-sum-exp / selected-logit split of LM-head paths simulated from the declared dtypes",
    7: "the registry's operator paths run here on the trainer's hidden states, not what each engine ran",
}
PROBE_NAMES = {
    1: "sample and token identity",
    2: "model state",
    3: "pre-softmax logits at the selected positions",
    4: "log-sum-exp and selected logit separately",
    5: "vocab-parallel reduce across TP ranks",
    6: "top-p/top-k retained sets and processed-logprob contract",
    7: "operator paths under the same fixed tokens",
}
DECISION_ORDER = (1, 2, 6, 3, 4, 5, 7)
REDUCED_POLICIES = ("bfloat16", "float16", "fp8")
MAX_LINES = 5  # mismatch lines quoted in a verdict's evidence


class Basis(BaseModel):
    """What a verdict was computed from. `recorded`: values the run's engines wrote while running
    (dumps, probe bundles, captures, vocab shards, weight digests), each side its own; `declarations`:
    what the run declared (dtypes, sampling flags) driving a simulation here; `none`: nothing was
    read (the boundary did not exist in the run, or its records are missing)."""

    kind: Literal["recorded", "declarations", "none"]
    detail: str


# Each probe's basis when it ran as designed; a verdict says otherwise where it stood on less.
BASES = {
    1: Basis(kind="recorded", detail="the train dump's fields against the rollout dump's, sample by sample"),
    2: Basis(kind="recorded", detail="digests of the weights each engine held (vLLM's read back from its workers, the trainer's as synced)"),
    3: Basis(kind="declarations", detail=FROM_DECLARATIONS[3]),
    4: Basis(kind="declarations", detail=FROM_DECLARATIONS[4]),
    5: Basis(kind="recorded", detail="each TP rank's recorded vocab shard of the trainer's logits and the trainer's recorded log-probs"),
    6: Basis(
        kind="recorded",
        detail="both sides' recorded log-probs in the probe bundles, matched to the candidate contracts recomputed (fp64) "
        "on the bundles' hidden states; the dumps' recorded sampling parameters and filter flags",
    ),
    7: Basis(kind="declarations", detail=FROM_DECLARATIONS[7]),
}
NOTHING_READ = "none"


class ProbeVerdict(BaseModel):
    number: int
    name: str
    status: Status
    verdict: str
    evidence: dict = Field(default_factory=dict)
    boundary: str | None = None
    basis: Basis  # given, else the probe's designed basis (BASES)

    @model_validator(mode="before")
    @classmethod
    def _designed_basis(cls, data):
        if isinstance(data, dict) and data.get("basis") is None and data.get("number") in BASES:
            data = {**data, "basis": BASES[data["number"]]}
        return data

    @model_validator(mode="after")
    def _judged_only_on_recorded_values(self):
        # A declaration is never evidence: a pass or a fail computed from one would be by construction.
        if self.status in ("pass", "fail") and self.basis.kind != "recorded":
            raise ValueError(f"probe {self.number}: status {self.status!r} on a {self.basis.kind!r} basis ({self.basis.detail})")
        return self


class ProbeReport(BaseModel):
    run: str
    probes: list[ProbeVerdict]
    drift_class: DriftClass
    decided_by: int | None  # the probe that decided the class, when a probe did
    # What decided it, in words: "probe 6 (...)", "boundary table", "boundary layer.0.mlp", "logged abs-diff".
    decided_by_evidence: str | None = None
    reason: str = ""
    boundary: str | None = None
    # False when a probe was not checked or not measured.
    complete: bool = True
    boundary_table: dict = Field(default_factory=dict)
    # What an `undecided` class lacks ("probe 6 (top-p/top-k ...)", "a readable dump").
    needs: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        """The class as printed: `undecided: needs probe 6 (...)` names what is missing."""
        return f"undecided: needs {', '.join(self.needs)}" if self.drift_class == "undecided" else self.drift_class

    def to_json(self) -> dict:
        data = self.model_dump()
        data["class"] = self.drift_class
        data["label"] = self.label
        return data


def thresholds(knobs) -> dict[str, float]:
    """The two limits the probes judge by, from the loaded knobs (thresholds.yaml)."""
    return {
        "floor": knobs.threshold("fp32_floor_max_abs_diff"),
        "min_removed": knobs.threshold("semantic_replay_min_removed_fraction"),
        "one_sided": knobs.threshold("contract_one_sided_min_fraction"),
        "temperature_drift": knobs.threshold("contract_temperature_max_drift"),
        "confidence": knobs.threshold("bootstrap_confidence"),
    }


def _verdict(
    number: int, status: Status, text: str, evidence: dict | None = None, boundary: str | None = None, basis: Basis | None = None
) -> ProbeVerdict:
    return ProbeVerdict(number=number, name=PROBE_NAMES[number], status=status, verdict=text, evidence=evidence or {}, boundary=boundary, basis=basis)


def _group_verdict(number: int, group: str, comparison, what: str) -> ProbeVerdict:
    mismatches = comparison.group(group)
    evidence = {
        "compared": comparison.compared,
        "not_comparable": comparison.not_comparable,
        "mismatch_count": len(mismatches),
        "mismatches": [m.line() for m in mismatches[:MAX_LINES]],
    }
    if mismatches:
        fields = sorted({m.field for m in mismatches})
        return _verdict(number, "fail", f"{what} differs between rollout and trainer in {', '.join(fields)}: {mismatches[0].line()}", evidence)
    relevant = [k for k in comparison.compared if group_fields(group, k)]
    if not relevant:
        copies = sorted(k for k in comparison.not_compared if group_fields(group, k))
        why = f" (only copies of one object on both sides: {', '.join(copies)})" if copies else ""
        return _verdict(
            number,
            NOT_CHECKED,
            f"no {what} field is recorded on both sides; nothing to compare{why}",
            evidence,
            basis=Basis(kind=NOTHING_READ, detail=f"no {what} field produced by each side on its own"),
        )
    return _verdict(number, "pass", f"{what} agrees on {', '.join(sorted(relevant))}", evidence)


def identity_verdict(comparison) -> ProbeVerdict:
    """Probe 1, with what each compared field came from and which fields were one object written twice."""
    verdict = _group_verdict(1, "identity", comparison, "sample and token identity")
    copies = {k: why for k, why in comparison.not_compared.items() if group_fields("identity", k)}
    verdict.evidence["not_compared"] = copies
    verdict.evidence["trainer_sources"] = dict(comparison.sources)
    if verdict.basis.kind != "recorded":
        return verdict
    if comparison.sources:
        own = ", ".join(f"{name} ({how})" for name, how in comparison.sources.items())
        detail = f"the trainer's own values - {own} - against the rollout dump's (vLLM's returned token ids and log-probs, the rollout's loss mask)"
    else:
        detail = "the train dump's fields, each counted as what the trainer received (the dump declares no provenance, as VIME's do), against the rollout dump's"
    if copies:
        detail += f"; not compared, one object written on both sides: {', '.join(sorted(copies))}"
    verdict.basis = Basis(kind="recorded", detail=detail)
    return verdict


WEIGHT_DIGEST_FIELD = "consistency_metadata.weights_sha"


def state_verdict(comparison, bundles: list | None = None) -> ProbeVerdict:
    """Probe 2 from the weights each engine holds: a digest of the engine's weights read back from it
    and of the trainer's (harness/embedded/weight_digest.py), per step. Weight-version counters are
    labels the caller passes, not a reading of the state: they can fail the probe (two labels that
    disagree) but never pass it. Where the probe bundles say how many tensors the step's digests
    hashed, a digest over no tensor is not a reading either (two empty digests are equal)."""
    verdict = _group_verdict(2, "state", comparison, "model state")
    if verdict.status == "fail":
        return verdict
    digests = comparison.compared.get(WEIGHT_DIGEST_FIELD, 0)
    verdict.evidence["weight_digests_compared"] = digests
    if not digests:
        return _verdict(
            2,
            NOT_CHECKED,
            "no digest of the weights each engine holds is recorded on both sides (weight-version counters label "
            "the state, they do not read it); model state not checked",
            verdict.evidence,
        )
    coverage = _digest_coverage(bundles or [])
    covered = ""
    if coverage:
        verdict.evidence["weight_digest_coverage"] = coverage
        empty = [step for step, c in coverage.items() if not c.get("tensors")]
        if empty:
            return _verdict(
                2, NOT_CHECKED, f"the weight digests of rollout {empty[0]} hash no tensor (no parameter name and shape in common)", verdict.evidence
            )
        tensors = sorted({int(c["tensors"]) for c in coverage.values()})
        left = max(len(c.get("not_comparable") or []) for c in coverage.values())
        covered = f", {'/'.join(map(str, tensors))} tensors hashed a step, {left} not comparable"
    return _verdict(
        2, "pass", f"model state: the weights each engine holds hash equal on {digests} samples ({WEIGHT_DIGEST_FIELD}{covered})", verdict.evidence
    )


def _digest_coverage(bundles: list) -> dict:
    """rollout id -> the step's weight-digest coverage, from the probe bundles that record it."""
    out = {}
    for bundle in bundles:
        value = bundle.scalar("weight_digest")
        if isinstance(value, dict) and "tensors" in value:
            out[bundle.rollout_id] = {k: value.get(k) for k in ("tensors", "not_comparable", "differing")}
    return out


def group_fields(group: str, field: str) -> bool:
    from harness.attribution.consistency import group_of

    if field == "weight_version":
        return group == "state"
    if field.startswith("consistency_metadata."):
        return group_of(field.removeprefix("consistency_metadata.")) == group
    return group == "identity"


def bundle_identity(bundles: list, dumps: RunDumps, comparison) -> None:
    """The targets the trainer gathered (probe bundle) must be the rollout's response tokens."""
    from harness.attribution.consistency import FieldMismatch, describe_targets

    for bundle in bundles:
        step = dumps.steps.get(bundle.rollout_id)
        if step is None:
            continue
        responses = {
            p.rollout.get("index"): p.rollout.get("response_ids") for p in step.pairs if p.rollout is not None and p.rollout.get("index") is not None
        }
        for index, start, end in bundle.segments:
            expected = responses.get(index)
            if expected is None:
                comparison.count("probe_bundle.targets", key="probe_bundle.targets")
                continue
            comparison.count("probe_bundle.targets")
            got = bundle.targets[start:end].numpy()
            if got.shape != expected.shape or (got != expected).any():
                comparison.mismatches.append(
                    FieldMismatch(step.rollout_id, index, "probe_bundle.targets", "identity", describe_targets(got, expected))
                )


def compare_sides(dumps: RunDumps, bundles: list | None = None):
    comparison = compare_run(dumps)
    bundle_identity(bundles or [], dumps, comparison)
    return comparison


def framework_probes(dumps: RunDumps, bundles: list | None = None, comparison=None) -> list[ProbeVerdict]:
    comparison = comparison or compare_sides(dumps, bundles)
    identity = identity_verdict(comparison)
    state = state_verdict(comparison, bundles)
    if comparison.layout:
        identity.evidence["batch_layout_examples"] = comparison.layout[:MAX_LINES]
    return [identity, state]


def load_bundles(dumps: RunDumps) -> tuple[list, list[str]]:
    from harness.attribution.probe_bundle import BundleProblem, read_bundle

    bundles, problems = [], []
    for _, step in sorted(dumps.steps.items()):
        if step.probe_file is None:
            continue
        try:
            bundle = read_bundle(step.probe_file)
        except BundleProblem as err:
            problems.append(f"{err} (code: malformed_probe_bundle)")
            continue
        bundle.rollout_id = step.rollout_id if bundle.rollout_id is None else int(bundle.rollout_id)
        bundles.append(bundle)
    return bundles, problems


def framework_checks(run: Run) -> list[ProbeVerdict]:
    """Probes 1 and 2 only: cheap (dumps and the probe bundles' target ids), for the ladder classifier."""
    dumps = read_run_dumps(run.path / "dumps")
    return framework_probes(dumps, load_bundles(dumps)[0])


def framework_messages(verdicts: list[ProbeVerdict]) -> tuple[list[str], list[str]]:
    """(failed, not checked): one line per framework probe of `framework_checks(run)` in each state;
    the ladder judge's framework_checks and framework_not_checked evidence."""

    def lines(keep) -> list[str]:
        return [f"probe {p.number} ({p.name}): {p.verdict}" for p in verdicts if keep(p.status)]

    return lines(lambda status: status == "fail"), lines(lambda status: status not in ("pass", "fail"))


def cached_framework_messages() -> Callable[[Run], tuple[list[str], list[str]]]:
    """run -> `framework_messages(framework_checks(run))`, computed once per run id: a parent rung's
    runs are judged by each of its children (the ladder session's fixtures, the recorded-ladder tool)."""
    seen: dict[str, tuple[list[str], list[str]]] = {}

    def messages(run: Run) -> tuple[list[str], list[str]]:
        if run.id not in seen:
            seen[run.id] = framework_messages(framework_checks(run))
        return seen[run.id]

    return messages


def contract_check(run: Run, knobs: Knobs) -> ProbeVerdict:
    """Probe 6 alone on a run's dumps and probe bundles, for the ladder's sampling rungs on backends
    with no replay run (VIME, ingested records): pass, fail, or not checked (never a pass by default)."""
    from harness.attribution.probe_contract import flag_membership, probe_contract

    settings = run_settings(run)
    dumps = read_run_dumps(run.path / "dumps")
    if not any(step.files for step in dumps.steps.values()):
        reason = "; ".join(dumps.warnings) or "no rollout_*.pt or train_*.pt dump"
        return _verdict(6, NOT_CHECKED, f"no readable dump ({reason}); contract not checked")
    limits = thresholds(knobs)
    bundles, problems = load_bundles(dumps)
    comparison = compare_sides(dumps, bundles)
    results = [{"file": b.path.name, **probe_contract(b, settings, limits["floor"], limits["min_removed"])} for b in bundles]
    results += [{"file": p.split(":")[0], "skipped": p, "evidence": {}} for p in problems]
    return _contract_verdict(
        results,
        flag_membership(dumps, settings),
        settings,
        comparison.group("contract"),
        limits["one_sided"],
        limits["min_removed"],
        temperature=measured_temperature(bundles, run.path / "dumps", settings, limits),
    )


def single_contract(settings: RunSettings) -> bool:
    """The declared sampling leaves one candidate contract (T = 1, no top-k/top-p): matching contracts
    cannot tell the sides apart, so probe 6 measures each side's temperature instead."""
    return settings.temperature == 1.0 and not settings.filters_on


def measured_temperature(bundles: list, dumps_dir, settings: RunSettings, limits: dict) -> dict | None:
    """probe_contract.temperature_check on a single-contract run (None on the others)."""
    if not single_contract(settings):
        return None
    from harness.attribution.probe_contract import temperature_check

    return temperature_check(bundles, dumps_dir, settings.temperature, limits["temperature_drift"], limits["confidence"], limits["min_removed"])


class Judged(NamedTuple):
    """What a numerical probe's bundles say, before its basis decides whether that is a verdict."""

    status: Status
    verdict: str
    evidence: dict
    boundary: str | None = None


def _numeric_verdict(number: int, results: list[dict], what: str) -> Judged:
    evaluated = [r for r in results if not r.get("skipped")]
    evidence = {"bundles": [{"file": r["file"], **r["evidence"]} for r in results]}
    if not evaluated:
        reasons = "; ".join(sorted({r.get("skipped", "") for r in results})) or "no probe bundle"
        # A boundary the run never crossed (probe 5 at TP=1): nothing was measured, and it blocks no class.
        evidence["not_applicable"] = bool(results) and all(r.get("not_applicable") for r in results)
        status = NOT_MEASURED if evidence["not_applicable"] else NOT_CHECKED
        return Judged(status, f"{what}: not {'measured' if evidence['not_applicable'] else 'evaluated'} ({reasons})", evidence)
    localised = [r for r in evaluated if r["localised"]]
    skipped = len(results) - len(evaluated)
    incomparable = [r for r in evaluated if not _finite_figures(r["evidence"])]
    if skipped or incomparable:
        # A probe passes only when every bundle passes: one that could not be evaluated, or whose
        # figures hold a NaN/inf (not comparable), leaves it not checked, whatever the others say.
        why = next((r["skipped"] for r in results if r.get("skipped")), None) or "a NaN/inf in its figures (not comparable)"
        return Judged(
            NOT_CHECKED, f"{what}: {skipped + len(incomparable)} of {len(results)} bundles not evaluated or not comparable ({why})", evidence
        )
    if localised and len(localised) == len(evaluated):
        # The boundary most bundles point to (bundles hold a few samples each; one may disagree).
        votes = Counter(r["boundary"] for r in localised)
        boundary = votes.most_common(1)[0][0]
        chosen = next(r for r in localised if r["boundary"] == boundary)
        evidence["side"], evidence["policy"] = chosen.get("side"), chosen.get("policy")
        evidence["boundary_votes"] = dict(votes)
        return Judged(
            "fail",
            f"{what}: boundary localised in {len(localised)} of {len(evaluated)} bundles ({votes[boundary]} name it): {boundary}",
            evidence,
            boundary,
        )
    if localised:
        return Judged(
            NOT_CHECKED,
            f"{what}: a boundary in {len(localised)} of {len(evaluated)} bundles only: neither a stable boundary nor a pass",
            evidence,
        )
    return Judged("pass", f"{what}: within the fp32 floor on every bundle", evidence)


def _finite_figures(evidence) -> bool:
    """False when a NaN or inf sits anywhere among a bundle's figures (nested stats included)."""
    if isinstance(evidence, dict):
        return all(_finite_figures(v) for v in evidence.values())
    if isinstance(evidence, (list, tuple)):
        return all(_finite_figures(v) for v in evidence)
    if isinstance(evidence, float):
        return math.isfinite(evidence)
    return True


def _declared_only(number: int, judged: Judged) -> ProbeVerdict:
    """A probe computed from declarations: its figures stay as evidence, its status is not measured."""
    if judged.status == NOT_CHECKED and not judged.evidence.get("bundles"):
        return _verdict(number, NOT_CHECKED, judged.verdict, judged.evidence, judged.boundary)
    judged.evidence["would_have_said"] = {"status": judged.status, "verdict": judged.verdict, "boundary": judged.boundary}
    return _verdict(
        number, NOT_MEASURED, f"not measured: {FROM_DECLARATIONS[number]} (the boundary table measures both engines' own tensors)", judged.evidence
    )


TP1_REASON = (
    "not measured: not applicable, the run used TP=1 - no vocab-parallel merge ran, so there is nothing to measure "
    "(probe 5 needs a TP>1 run's recorded vocab shards; no ladder rung runs TP>1)"
)


def _vocab_parallel(judged: Judged, settings: RunSettings, bundles: list) -> ProbeVerdict:
    """Probe 5 from the TP ranks' recorded shards; on a TP=1 run not applicable (not measured,
    blocks no class), whatever the bundles hold."""
    tp_one = settings.tp_size == 1 and all(int(b.scalar("tp_size", 1) or 1) == 1 for b in bundles)
    if tp_one or judged.evidence.get("not_applicable"):
        evidence = {**judged.evidence, "not_applicable": True, "tp_size": settings.tp_size}
        return _verdict(5, NOT_MEASURED, TP1_REASON, evidence, basis=Basis(kind=NOTHING_READ, detail="no vocab-parallel merge ran (TP=1)"))
    return _verdict(5, judged.status, judged.verdict, judged.evidence, judged.boundary)


def bundle_probes(
    bundles: list,
    problems: list[str],
    settings: RunSettings,
    limits: dict,
    dumps: RunDumps,
    comparison=None,
    replay: dict | None = None,
    dumps_dir=None,
) -> list[ProbeVerdict]:
    from harness.attribution.probe_contract import flag_membership, probe_contract
    from harness.attribution.probe_numerics import BundleNumerics, probe_logits, probe_lse_split, probe_paths, probe_vocab_parallel

    per_probe: dict[int, list[dict]] = {n: [] for n in (3, 4, 5, 6, 7)}
    for bundle in bundles:
        path = bundle.path
        num = BundleNumerics(bundle, settings)
        for number, fn in ((3, probe_logits), (4, probe_lse_split), (5, probe_vocab_parallel), (7, probe_paths)):
            per_probe[number].append({"file": path.name, **fn(num, limits["floor"])})
        per_probe[6].append({"file": path.name, **probe_contract(bundle, settings, limits["floor"], limits["min_removed"])})
    if problems:
        for results in per_probe.values():
            results.extend({"file": p.split(":")[0], "skipped": p, "evidence": {}, "localised": False} for p in problems)
    inconsistent = [r["file"] for r in per_probe[3] if r.get("evidence", {}).get("bundle_inconsistent")]
    if inconsistent:
        problems.append(
            f"{', '.join(inconsistent)}: the bundle's hidden states and LM-head weight do not reproduce its "
            "own trainer log-probs within the fp32 floor (a weight captured after the optimizer step?); "
            "probe 3 cannot localise drift upstream of the LM head (code: bundle_inconsistent)"
        )
    verdicts = {n: _declared_only(n, _numeric_verdict(n, per_probe[n], PROBE_NAMES[n])) for n in (3, 4, 7)}
    verdicts[5] = _vocab_parallel(_numeric_verdict(5, per_probe[5], PROBE_NAMES[5]), settings, bundles)
    contract_mismatches = comparison.group("contract") if comparison is not None else []
    verdicts[6] = _contract_verdict(
        per_probe[6],
        flag_membership(dumps, settings),
        settings,
        contract_mismatches,
        limits["one_sided"],
        limits["min_removed"],
        replay,
        measured_temperature(bundles, dumps_dir, settings, limits) if "temperature_drift" in limits else None,
    )
    return [verdicts[n] for n in (3, 4, 5, 6, 7)]


def _recompute_text(evidence: dict) -> str:
    pooled = evidence["pooled"]
    share, spread = pooled["removed_fraction"], pooled["removed_fraction_per_bundle"]
    measured = f"{share:.0%}" if share is not None and math.isfinite(share) else "an uncomputable share"
    per_bundle = f" (per bundle {spread['min']:.0%} to {spread['max']:.0%})" if spread["n"] else ""
    return (
        f"recomputing the trainer's log-probs under it (fp64, on the bundles' hidden states, {evidence['pooled_tokens']} tokens) "
        f"removes {measured} of their drift{per_bundle}"
    )


def _replay_text(replay: dict) -> str:
    if replay.get("removed_fraction") is None:
        return f"the replay run {replay['run']} gives no share ({replay.get('why', 'the run logged no drift')})"
    return (
        f"replaying it in the trainer (run {replay['run']}, {replay['steps']} steps after warmup) removes {replay['removed_fraction']:.0%} "
        f"of the logged abs-diff ({replay['run_mean']:.3g} -> {replay['replay_mean']:.3g})"
    )


NO_REPLAY = "no replay run measured (harness attribute --replay-run DIR takes the rung's processed-replay run)"


def _contract_verdict(
    results: list[dict],
    membership: dict,
    settings: RunSettings,
    mismatches: list,
    one_sided: float = 1.0,
    min_removed: float = 1.0,
    replay: dict | None = None,
    temperature: dict | None = None,
) -> ProbeVerdict:
    """`replay`: probe_contract.measured_replay's share from a replay run of this run; when given it is
    the share the threshold judges, else the recompute on the bundles' hidden states is, and the verdict
    says which one it was (never "replaying removes" without a replay run). `temperature`:
    probe_contract.temperature_check, which alone decides a single-contract run (single_contract)."""
    evidence = {
        "bundles": [{"file": r["file"], **r["evidence"]} for r in results],
        "pooled_tokens": sum(int(r["evidence"].get("tokens") or 0) for r in results if not r.get("skipped")),
        "dump_filter_flags": membership,
        "recorded_contract_mismatches": [m.line() for m in mismatches[:MAX_LINES]],
    }
    if mismatches:
        fields = ", ".join(sorted({m.field for m in mismatches}))
        return _verdict(
            6,
            "fail",
            f"semantic: the sides recorded different sampling parameters ({fields}): {mismatches[0].line()}",
            evidence,
            "sampling contract (recorded sampling parameters)",
        )
    if single_contract(settings):
        return _temperature_verdict(temperature, evidence)
    evaluated = [r for r in results if not r.get("skipped")]
    comparable = [r for r in evaluated if r["evidence"].get("comparable", True)]
    differing = [r for r in comparable if r["evidence"].get("contract_differs")]
    recomputed = pooled_removed_fraction(comparable)
    evidence["pooled"] = {
        "bundles": len(results),
        "comparable": len(comparable),
        "contract_differs": len(differing),
        "contract_agrees": sum(bool(r["evidence"].get("contract_agrees")) for r in comparable),
        # a recompute on the bundles' recorded hidden states (fp64), not a replay run
        "removed_fraction": recomputed,
        "removed_fraction_source": f"recomputed in fp64 on the probe bundles' hidden states ({evidence['pooled_tokens']} tokens)",
        "removed_fraction_per_bundle": _spread([r["evidence"].get("removed_fraction") for r in differing]),
        "min_removed_fraction": min_removed,
    }
    evidence["replay"] = (
        {"measured": False, "why": NO_REPLAY} if replay is None else {"measured": replay.get("removed_fraction") is not None, **replay}
    )
    # The share the threshold judges: the replay run's where one was measured, else the recompute's.
    removed = recomputed if replay is None else replay.get("removed_fraction")
    measured_by = _recompute_text(evidence) + f"; {NO_REPLAY}" if replay is None else f"{_replay_text(replay)}; {_recompute_text(evidence)}"
    basis = (
        BASES[6]
        if replay is None
        else Basis(kind="recorded", detail=f"{BASES[6].detail}; the replay run {replay['run']}'s logged abs-diff against this run's")
    )
    if differing and len(differing) == len(comparable) and removed is not None and removed >= min_removed:
        # Every bundle that can be compared puts the trainer on another contract than the rollout's,
        # and the rollout's contract removes at least min_removed of the drift over the whole run (the
        # replay run's logged abs-diff, else the recompute over all of the run's probe tokens: the
        # quantity the threshold is defined on; a 2-sample bundle's own fraction spreads 0.54-1.0 on
        # a top-p run, and one of 30 crossing 0.5 decides nothing).
        first = differing[0]["evidence"]
        return _verdict(
            6,
            "fail",
            f"semantic: in all {len(differing)} comparable bundles the trainer follows '{first['trainer_follows']}' but the "
            f"rollout's declared contract is '{first['declared_rollout_contract']}'; {measured_by}",
            evidence,
            "sampling contract (temperature / top-k / top-p processed log-probs)",
            basis,
        )
    if membership["sampled_outside_flagged_set"] and settings.filters_on:
        return _verdict(
            6,
            "fail",
            f"semantic: {membership['sampled_outside_flagged_set']} sampled tokens lie outside the "
            "rollout's own top-k/top-p set (the filter did not apply to sampling)",
            evidence,
            "sampling contract (retained top-k/top-p set)",
        )
    negative = membership.get("dlogp_negative_fraction")
    if not evaluated and settings.filters_on and "processed" in settings.logprobs_mode and negative is not None and negative >= one_sided:
        # Dumps only: a one-sided dlogp is the processed-vs-raw gap (thresholds.contract_one_sided_min_fraction).
        return _verdict(
            6,
            "fail",
            f"semantic: {negative:.1%} of {membership['dlogp_tokens']} tokens have trainer log-prob < rollout log-prob "
            f"(>= {one_sided:.0%}): the trainer's raw log-probs against the rollout's processed (top-k/top-p renormalised) ones",
            evidence,
            "sampling contract (processed vs raw log-probs, one-sided dlogp in the dumps)",
            Basis(kind="recorded", detail="the sign of trainer - rollout log-prob over the dumps' recorded log-probs (no probe bundle)"),
        )
    if not evaluated:
        return _verdict(6, NOT_CHECKED, "no probe bundle with both sides' log-probs; contract not checked", evidence)
    if len(comparable) < len(results):
        return _verdict(
            6,
            NOT_CHECKED,
            f"contract not checked: {len(results) - len(comparable)} of {len(results)} bundles not comparable "
            "(not evaluated, or a NaN/inf in their log-probs or contract fits)",
            evidence,
        )
    if all(r["evidence"].get("contract_agrees") for r in comparable):
        return _verdict(
            6,
            "pass",
            f"trainer and rollout follow the same sampling contract (temperature, top-k/top-p) in all {len(comparable)} bundles{_single(results)}",
            evidence,
            basis=basis,
        )
    return _verdict(
        6,
        NOT_CHECKED,
        f"contract not decided: the trainer follows another contract than the rollout's in {len(differing)} of {len(comparable)} "
        f"bundles; under the rollout's contract, {measured_by} (semantic needs every bundle and >= {min_removed:.0%})",
        evidence,
    )


def _single(results: list[dict]) -> str:
    """Say so when the bundles' contracts left one candidate (a run whose declared sampling has several
    may still have bundles where they coincide)."""
    fits = [r["evidence"].get("trainer_contract_fit") or {} for r in results if not r.get("skipped")]
    if fits and all(len(f) == 1 for f in fits):
        return f" (one candidate contract, '{next(iter(fits[0]))}': no alternative was distinguishable)"
    return ""


def _temperature_verdict(temperature: dict | None, evidence: dict) -> ProbeVerdict:
    """Probe 6 on a single-contract run: each side's measured temperature against the declared one
    (probe_contract.temperature_status); never a pass from the one candidate contract alone."""
    from harness.attribution.probe_contract import temperature_status

    if temperature is None:
        return _verdict(
            6,
            NOT_CHECKED,
            "one candidate contract (T=1, no top-k/top-p) and no temperature fit was made; contract not checked",
            evidence,
            basis=Basis(kind=NOTHING_READ, detail="no temperature fit"),
        )
    evidence["temperature"] = temperature
    status, text = temperature_status(temperature)
    basis = Basis(
        kind="recorded",
        detail=f"each side's recorded log-probs fitted for the temperature that explains them, from {temperature['source']}",
    )
    return _verdict(6, status, text, evidence, "sampling contract (temperature)" if status == "fail" else None, basis)


def pooled_removed_fraction(results: list[dict]) -> float | None:
    """1 - replayed / observed drift over every token of the given bundles (token-weighted means):
    how much of the run's probe-token drift replaying the rollout's contract on the trainer removes."""
    observed = replayed = 0.0
    for r in results:
        e = r["evidence"]
        if e.get("observed_mean_abs_dlogp") is None or e.get("replayed_mean_abs_dlogp") is None:
            return None
        observed += e["observed_mean_abs_dlogp"] * e["tokens"]
        replayed += e["replayed_mean_abs_dlogp"] * e["tokens"]
    return 1.0 - replayed / observed if observed > 0 else None


def _spread(values: list) -> dict:
    finite = sorted(v for v in values if v is not None and math.isfinite(v))
    if not finite:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan"), "n": 0}
    return {"min": finite[0], "median": finite[len(finite) // 2], "max": finite[-1], "n": len(finite)}


def probe_label(number: int) -> str:
    return f"probe {number} ({PROBE_NAMES[number]})"


# Probes 3 and 4 measured from both engines' own tensors: the boundary table's rows at the LM head's
# output (each engine's own logits, log-sum-exp and selected logit at the captured positions:
# Megatron's forward on the trainer side, vLLM's compute_logits and sampler on the rollout side).
TABLE_ROWS = {3: ("logits.target", "logits"), 4: ("logits.target", "logsumexp")}


def measured_from_table(number: int, table) -> ProbeVerdict | None:
    """Probe 3 or 4 from the boundary table when it decides (captures that carry the drift, every row
    comparable): fail when one of its rows breaks its envelope, pass when all stay within. None
    when the table cannot stand in (the probe then stays not measured)."""
    if not table.decides:
        return None
    rows = {r.boundary: r for r in table.rows if r.boundary in TABLE_ROWS[number]}
    if set(rows) != set(TABLE_ROWS[number]):
        return None
    evidence = {
        "source": f"boundary table ({', '.join(table.captures)}; coverage {table.coverage.get('min'):.3g})",
        "rows": {name: {"ratio": r.ratio, "divergence_mean": r.divergence["mean"], "envelope_mean": r.envelope["mean"]} for name, r in rows.items()},
        "k": table.k,
    }
    broken = [r for r in rows.values() if r.breaks]
    text = ", ".join(f"{name} {r.ratio:.3g}x" for name, r in rows.items())
    basis = Basis(
        kind="recorded",
        detail=f"both engines' own captured tensors (Megatron's forward, vLLM's compute_logits and sampler), boundary table rows "
        f"{', '.join(TABLE_ROWS[number])} at {', '.join(table.captures)}",
    )
    if broken:
        return _verdict(number, "fail", f"both engines' own tensors: {broken[0].line()}", evidence, broken[0].boundary, basis)
    return _verdict(number, "pass", f"both engines' own tensors within {table.k:g}x their envelopes ({text})", evidence, basis=basis)


def decide(verdicts: list[ProbeVerdict], table, drift: dict | None = None):
    """The class from measured evidence only, by the same path as the ladder's checks
    (harness.attribution.boundaries.classify): probes 1, 2, 6, probe 5 where it was measured, the
    boundary table. Probes 3, 4 and 7 are not measured (computed from declarations) and decide nothing."""
    from harness.attribution.boundaries import classify

    by_number = {v.number: v for v in verdicts}
    measured = [by_number[5]] if by_number[5].status != NOT_MEASURED else []
    return classify(table, [by_number[1], by_number[2]], by_number[6], measured, drift)


def replay_share(run: Run, replay_run: Run | None, knobs: Knobs) -> dict | None:
    """The replay run's measured share for probe 6 (None without a replay run); raises
    probe_contract.ReplayRunProblem when `replay_run` is not this run's spec with the replay on."""
    if replay_run is None:
        return None
    from harness.attribution.probe_contract import measured_replay

    return measured_replay(run, replay_run, knobs.classification.semantic_replay.flag, int(knobs.threshold("warmup_steps")))


def run_probes(run: Run, knobs: Knobs, replay_run: Run | None = None) -> ProbeReport:
    """The seven probes on a loaded run, judged by the loaded knobs' thresholds. `replay_run`: a run
    of the same spec with the processed-contract replay on (the ladder's processed-replay run of the
    rung): probe 6 then reports, and judges by, the share of the drift it measured removed."""
    settings = run_settings(run)
    replay = replay_share(run, replay_run, knobs)
    dumps = read_run_dumps(run.path / "dumps")
    limits = thresholds(knobs)
    bundles, problems = load_bundles(dumps)
    comparison = compare_sides(dumps, bundles)
    verdicts = framework_probes(dumps, bundles, comparison)
    verdicts += bundle_probes(bundles, problems, settings, limits, dumps, comparison, replay, run.path / "dumps")
    verdicts.sort(key=lambda v: v.number)
    from harness.attribution.boundaries import logged_abs_diff, run_boundary_table

    table = run_boundary_table(run, knobs)
    for number in TABLE_ROWS:  # measured from both engines' captured tensors where the table can say
        measured = measured_from_table(number, table)
        if measured is not None:
            simulated = verdicts[number - 1]
            measured.evidence["simulated_from_declarations"] = simulated.evidence.get("would_have_said")
            verdicts[number - 1] = measured
    logged = list(logged_abs_diff(run).values())
    drift = {"max": max(logged) if logged and all(math.isfinite(v) for v in logged) else None, "floor": limits["floor"]}
    decided = decide(verdicts, table, drift)
    drift_class, needs, evidence = decided.drift_class, decided.needs, decided.decided_by
    decided_by = int(evidence.split()[1]) if evidence and evidence.startswith("probe ") else None
    boundary = next((v.boundary for v in verdicts if v.number == decided_by), None) if decided_by else None
    if drift_class == "candidate-operator" and table.localised is not None and decided_by is None:
        boundary = table.localised.boundary
    if not any(step.files for step in dumps.steps.values()):  # no rollout_*.pt / train_*.pt could be read
        drift_class, decided_by, boundary, needs, evidence = "undecided", None, None, ["a readable dump"], None
    warnings = list(dumps.warnings) + problems + [f"run: {p}" for p in run.problems]
    if not bundles and not problems:
        warnings.append(f"{run.path}/dumps: no probe_<rollout_id>.pt bundles; probes 3-7 not checked (code: probe_bundle_missing)")
    return ProbeReport(
        run=run.id,
        probes=verdicts,
        drift_class=drift_class,
        decided_by=decided_by,
        decided_by_evidence=evidence,
        reason=decided.reason,
        boundary=boundary,
        complete=all(v.status == "pass" or v.status == "fail" for v in verdicts),
        needs=needs,
        warnings=warnings,
        boundary_table=table.to_json(),
    )
