"""The readiness criteria's checks (harness.judge.readiness) on evidence built to meet them and built not
to: every check can come out met, not met and not checked, and a check whose evidence is missing is
never met. The knob table (knobs/readiness.yaml) resolves every flag the P1 ladder changes."""

from __future__ import annotations

from harness import DEFAULT_KNOBS_DIR
from harness.judge import readiness as checks
from harness.spec import load_knobs
from harness.spec.resolve import resolve

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def seed(seed: int, mean: float, findings=()) -> checks.SeedFigures:
    return checks.SeedFigures(seed, f"run-{seed}", (2, 29, 28), mean, (mean * 0.9, mean * 1.1), 0.1, 0.1, list(findings))


def test_near_aligned_met_not_met_and_not_checked():
    good = checks.ReadinessEvidence(near_aligned=[seed(2026, 1.3e-3), seed(2027, 1.2e-3)])
    assert checks.near_aligned_low_and_stable(good, KNOBS).evidence["verdict"] == "met"
    bad = checks.ReadinessEvidence(
        near_aligned=[seed(2026, 1.3e-3), seed(2027, 0.2, ["near-aligned: mean abs-diff 0.2 > thresholds.near_aligned_max_abs_diff"])]
    )
    verdict = checks.near_aligned_low_and_stable(bad, KNOBS)
    assert not verdict.passed and verdict.evidence["verdict"] == "not met" and "0.2" in verdict.message
    missing = checks.ReadinessEvidence(problems={"near_aligned": "LookupError: no run"})
    assert checks.near_aligned_low_and_stable(missing, KNOBS).evidence["verdict"] == "not checked"


def _delta(rung, parent, knobs, unknown=(), delta=True):
    return checks.KnobDelta(
        rung, parent, knobs, list(unknown), {"diff": 1e-3, "low": 5e-4, "high": 1.5e-3, "seeds": 5} if delta else None, "" if delta else "short run"
    )


def test_each_knob_isolated_needs_every_mismatch_knob_alone():
    knobs = ["fp8-rollout", "top-p"]
    met = checks.ReadinessEvidence(
        knob_deltas=[
            _delta("fp8-rollout", "near-aligned", {"fp8-rollout": ["vllm-quantization"]}),
            _delta("top-p", "near-aligned", {"top-p": ["rollout-top-p"]}),
        ],
        mismatch_knobs=knobs,
    )
    assert checks.each_knob_isolated(met, KNOBS).passed
    combined_only = checks.ReadinessEvidence(
        knob_deltas=[_delta("fp8-rollout", "near-aligned", {"fp8-rollout": ["vllm-quantization"], "top-p": ["rollout-top-p"]})], mismatch_knobs=knobs
    )
    verdict = checks.each_knob_isolated(combined_only, KNOBS)
    assert verdict.evidence["verdict"] == "not met" and "no rung changes fp8-rollout alone" in verdict.message
    unknown = checks.ReadinessEvidence(
        knob_deltas=[*met.knob_deltas, _delta("x", "near-aligned", {}, unknown=["mystery-flag"])], mismatch_knobs=knobs
    )
    assert "mystery-flag" in checks.each_knob_isolated(unknown, KNOBS).message
    unmeasured = checks.ReadinessEvidence(
        knob_deltas=[_delta("fp8-rollout", "near-aligned", {"fp8-rollout": ["q"]}, delta=False), met.knob_deltas[1]], mismatch_knobs=knobs
    )
    assert checks.each_knob_isolated(unmeasured, KNOBS).evidence["verdict"] == "not checked"


def test_the_knob_table_covers_every_flag_the_ladder_changes():
    table = KNOBS.readiness
    for rung in KNOBS.rungs.values():
        if rung.parent is None or table.stage not in rung.stages or table.stage not in KNOBS.rungs[rung.parent].stages:
            continue
        mine, theirs = (resolve(KNOBS, table.stage, r, "colocate", "embedded").flags for r in (rung.id, rung.parent))
        changed = {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)}
        assert all(table.knob_of(flag) for flag in changed), f"{rung.id}: {sorted(f for f in changed if not table.knob_of(f))}"


def _budget(verdict, boundary=None):
    row = {"lever": "fp8-weights", "kind": "operator", "add_one": {"value": 0.26, "low": 0.21, "high": 0.31}}
    return {"verdict": verdict, "boundary": boundary, "drift": 5.5e-3, "seeds": [2026, 2027, 2028], "levers": [row], "reason": f"{verdict} (numbers)"}


def test_drift_localised_by_any_budget_rung_or_the_budgets_numbers_say_none_is():
    met = checks.ReadinessEvidence(budgets={"near-aligned": _budget("inconclusive"), "fp8-rollout": _budget("localised", "fp8-weights")})
    assert checks.drift_localised(met, KNOBS).passed
    none = checks.ReadinessEvidence(budgets={"near-aligned": _budget("not localised"), "fp8-rollout": _budget("inconclusive")})
    verdict = checks.drift_localised(none, KNOBS)
    assert verdict.evidence["verdict"] == "not met" and verdict.message.startswith("not met: none is")
    assert verdict.evidence["budgets"]["fp8-rollout"]["largest_add_one"]["lever"] == "fp8-weights"
    unmeasured = checks.ReadinessEvidence(budgets={"fp8-rollout": {"not_measured": "no weights kept"}})
    assert checks.drift_localised(unmeasured, KNOBS).evidence["verdict"] == "not checked"


def _bench(differing=0, ratio=0.5, gap=0.0):
    row = {
        "operator": "fp8-block-linear",
        "linear": "layer.0.qkv",
        "rows": 100,
        "max_ulps": 2.0,
        "max_bound_ratio": ratio,
        "invariance_rows": 16,
        "invariance_differing": differing,
    }
    return {
        "source": "capture_2.pt",
        "rows": [row],
        "candidate_gap": {"layer.0.qkv": {"max": gap}},
        "native_gap": {"layer.0.qkv": {"max": 0.03}},
        "problems": [],
    }


def test_candidate_on_fixed_tensors_keeps_its_contract_or_is_not_met():
    assert checks.candidate_testable_with_fixed_tensors(checks.ReadinessEvidence(bench=_bench(), candidate="fp8-block-linear"), KNOBS).passed
    for bench, words in (
        (_bench(differing=3), "rows differ"),
        (_bench(ratio=1.5), "times its contract's bound"),
        (_bench(gap=1e-3), "train-rollout gap"),
    ):
        verdict = checks.candidate_testable_with_fixed_tensors(checks.ReadinessEvidence(bench=bench, candidate="fp8-block-linear"), KNOBS)
        assert verdict.evidence["verdict"] == "not met" and words in verdict.message
    absent = checks.ReadinessEvidence(bench=_bench(), candidate="another-operator")
    assert checks.candidate_testable_with_fixed_tensors(absent, KNOBS).evidence["verdict"] == "not checked"


def test_final_ab_needs_the_contract_and_one_metadata_contract_on_both_sides():
    ab = {"pair": "a vs b", "baseline": "r1", "candidate": "r2", "contract": [], "records": {"baseline": [], "candidate": []}}
    ab["missing"] = {"baseline": [], "candidate": []}
    assert checks.final_ab_same_contract(checks.ReadinessEvidence(final_ab=ab), KNOBS).passed
    # one side records the image, the other does not: not one metadata contract
    broken = {**ab, "records": {"baseline": [], "candidate": ["run record r2 lacks: image"]}, "missing": {"baseline": [], "candidate": ["image"]}}
    verdict = checks.final_ab_same_contract(checks.ReadinessEvidence(final_ab=broken), KNOBS)
    assert verdict.evidence["verdict"] == "not met" and "candidate lacks image" in verdict.message
    # both lack it (an embedded run in a container naming none): the same contract, and the message says what neither names
    both = {**ab, "missing": {"baseline": ["image"], "candidate": ["image"]}}
    verdict = checks.final_ab_same_contract(checks.ReadinessEvidence(final_ab=both), KNOBS)
    assert verdict.passed and "neither record names: image" in verdict.message
    mismatched = {**ab, "contract": ["prompts differ"]}
    assert not checks.final_ab_same_contract(checks.ReadinessEvidence(final_ab=mismatched), KNOBS).passed


def test_every_criterion_names_a_check():
    assert {c.check for c in KNOBS.readiness.criteria} <= set(checks.CHECKS) == set(checks.NEEDS)
