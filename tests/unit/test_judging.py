"""The acceptance checks and the rung classifier against runs built to pass and built to fail."""

from __future__ import annotations

import numpy as np
import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.experiment.evidence import acceptance_context, judge_rung
from harness.judge.acceptance import CHECKS
from harness.judge.budget import LOCALISED, NOT_LOCALISED
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
RNG = np.random.default_rng(7)


def noisy(mean, scale=0.05):
    """AR(1)-ish noise around `mean`, seeded: a realistic step series."""
    values = [mean]
    for _ in range(60):
        values.append(mean + 0.5 * (values[-1] - mean) + RNG.normal(0, scale * mean))
    return lambda n: float(values[n])


def context(run, others=None):
    others = others or {}

    def fetch(rung, **overrides):
        key = (rung, tuple(sorted(overrides.items())))
        if key not in others:
            raise LookupError(key)
        return others[key]

    return acceptance_context(run, KNOBS, fetch)


def test_every_check_named_in_knobs_exists():
    for criterion in KNOBS.acceptance.criteria:
        assert criterion.check in CHECKS, f"knobs/acceptance.yaml: {criterion.id} names unknown check {criterion.check!r}"


def test_a_healthy_baseline_passes_every_self_contained_check(build_run):
    run = build_run(abs_diff=noisy(0.03))
    for name in ("completes_without_failures", "reward_does_not_collapse", "abs_diff_present_every_step", "record_is_complete"):
        verdict = CHECKS[name](context(run))
        assert verdict.passed, f"{name}: {verdict.message}"


def test_too_few_steps_fails_with_the_count_and_threshold(build_run):
    verdict = CHECKS["completes_without_failures"](context(build_run(steps=12)))
    assert not verdict.passed
    assert "only 12 rollout steps logged (steps 0-11)" in verdict.message and "min_rollout_steps = 30" in verdict.message


def test_an_oom_line_fails_with_its_line_number(build_run):
    oom = "(MegatronTrainRayActor pid=881) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    run = build_run(extra_lines=[oom])
    verdict = CHECKS["completes_without_failures"](context(run))
    assert not verdict.passed
    assert "log.txt line 61: cuda-oom" in verdict.message, verdict.message


def test_a_collapsing_reward_fails_naming_the_windows(build_run):
    run = build_run(reward=lambda n: 0.5 if n < 15 else 0.12)
    verdict = CHECKS["reward_does_not_collapse"](context(run))
    assert not verdict.passed
    assert "mean of steps 25-29 = 0.120" in verdict.message and "reward_collapse_ratio" in verdict.message, verdict.message


def test_a_reward_of_nan_fails_naming_the_step(build_run):
    run = build_run(reward=lambda n: float("nan") if n == 7 else 0.4)
    verdict = CHECKS["reward_does_not_collapse"](context(run))
    assert not verdict.passed and "steps [7]" in verdict.message


def test_a_missing_metric_fails_naming_the_steps(build_run):
    run = build_run(drop_metric_at=(3, 17))
    verdict = CHECKS["abs_diff_present_every_step"](context(run))
    assert not verdict.passed
    assert "missing at steps [3, 17]" in verdict.message


def test_mismatch_must_clear_the_near_aligned_rung(build_run):
    baseline = build_run("baseline", abs_diff=noisy(0.05))
    near = build_run("near", rung="near-aligned", abs_diff=noisy(0.013))
    assert CHECKS["mismatch_above_near_aligned"](context(baseline, {("near-aligned", ()): near})).passed
    same = build_run("same", rung="near-aligned", abs_diff=noisy(0.05))
    verdict = CHECKS["mismatch_above_near_aligned"](context(baseline, {("near-aligned", ()): same}))
    assert not verdict.passed and "includes zero" in verdict.message, verdict.message


def test_aa_stability_uses_a_second_seed_and_rejects_disagreement(build_run):
    run = build_run("a", abs_diff=noisy(0.03))
    agree = build_run("b", seed=1235, abs_diff=noisy(0.03))
    verdict = CHECKS["stable_under_aa"](context(run, {("fp8-plus-filters", (("seed", 1235),)): agree}))
    assert verdict.passed, verdict.message
    assert "seeds 1234 and 1235" in verdict.message
    disagree = build_run("c", seed=1235, abs_diff=noisy(0.06))
    verdict = CHECKS["stable_under_aa"](context(run, {("fp8-plus-filters", (("seed", 1235),)): disagree}))
    assert not verdict.passed, verdict.message


def test_an_embedded_run_in_an_unnamed_container_lacks_its_image(build_run):
    """The check never fills the image in: a run whose host shows a container (/.dockerenv) but names
    no image has not recorded it, on the embedded backend as on a cluster."""
    environment = {
        "harness": {"commit": "abc"},
        "container": {"image": None, "container_hints": ["/.dockerenv"], "note": "pass the image explicitly"},
        "hardware": {"cpu": {"model": "cpu"}},
    }
    verdict = CHECKS["record_is_complete"](context(build_run(environment=environment)))
    assert not verdict.passed and "image (not recorded (container hints: /.dockerenv)" in verdict.message, verdict.message
    no_container = CHECKS["record_is_complete"](context(build_run("bare")))
    assert no_container.passed and "no container" in no_container.message, no_container.message


def test_a_wandb_run_must_record_its_link(build_run):
    environment = {
        "harness": {"commit": "abc"},
        "container": {"image": "nvcr.io/vime:1", "source": "option"},
        "hardware": {"cpu": {"model": "cpu"}},
        "wandb": {"mode": "online", "url": None, "note": "the log names no W&B run"},
    }
    verdict = CHECKS["record_is_complete"](context(build_run(environment=environment)))
    assert not verdict.passed and "W&B/log link (W&B was on but the record names no run" in verdict.message, verdict.message
    linked = dict(environment, wandb={"mode": "online", "url": "https://wandb.ai/team/vime/runs/abc"})
    assert CHECKS["record_is_complete"](context(build_run("linked", environment=linked))).passed


def test_a_cluster_run_without_an_image_is_an_incomplete_record(build_run):
    run = build_run(
        backend="vime", environment={"vime": {"commit": "abc"}, "container": {"image": None}, "hardware": {"gpus": {"models": ["NVIDIA GB200"]}}}
    )
    verdict = CHECKS["record_is_complete"](context(run))
    assert not verdict.passed and "image" in verdict.message


def fetcher(runs):
    def fetch(rung, **overrides):
        return runs[(rung, tuple(sorted(overrides.items())))]

    return fetch


def with_flags(run, **flags):
    run.spec.flags.update(flags)
    return run


def test_classifier_calls_a_delta_removed_by_replay_semantic(build_run):
    parent = with_flags(build_run("parent", rung="near-aligned", abs_diff=noisy(0.013)), **{"rollout-top-p": 1.0})
    child = with_flags(build_run("child", rung="top-p", abs_diff=noisy(0.035)), **{"rollout-top-p": 0.95})
    replay = build_run("replay", rung="top-p", abs_diff=noisy(0.0135))
    runs = {("top-p", ()): child, ("near-aligned", ()): parent, ("top-p", (("embedded-replay-processed-logprobs", True),)): replay}
    judgement = judge_rung(KNOBS.rungs["top-p"], KNOBS, fetcher(runs), lambda run: [])
    assert (judgement.observed_direction, judgement.drift_class) == ("up", "semantic"), judgement.summary()


def test_a_rung_whose_change_is_the_replay_is_not_judged_semantic_by_replaying_itself(build_run):
    """processed-replay's own change is the replay switch, so the drifting parent's "replay run" is the
    rung's own run (the same resolved spec, the same run id): the share it removes is 1.0 by
    construction. Probe 6 on the parent's dumps decides the contract instead; here it passes, so the
    class is not semantic, and the replay switch is no precision or workload flag: undecided."""
    filters = {"rollout-top-p": 0.95, "rollout-top-k": 40}
    parent = with_flags(build_run("parent", rung="fp8-plus-filters", abs_diff=noisy(0.0093, 0.02)), **filters)
    child = with_flags(
        build_run("child", rung="processed-replay", abs_diff=noisy(0.003, 0.02)), **filters, **{"embedded-replay-processed-logprobs": True}
    )
    replay_of_parent = ("fp8-plus-filters", (("embedded-replay-processed-logprobs", True),))
    runs = {("processed-replay", ()): child, ("fp8-plus-filters", ()): parent, replay_of_parent: child}
    asked = []

    def contract(run):
        asked.append(run.id)
        return "pass", "the trainer computes the rollout's contract"

    judgement = judge_rung(KNOBS.rungs["processed-replay"], KNOBS, fetcher(runs), lambda run: [], contract_check=contract)
    assert judgement.observed_direction == "down", judgement.summary()
    assert judgement.drift_class != "semantic" and "removed_fraction" not in judgement.evidence, judgement.summary()
    assert "parent" in asked and "compare a run with itself" in judgement.summary()
    assert judgement.evidence["class_from"]["rung"] == "fp8-plus-filters"


MEASURED_T = "both sides' measured temperature lies within the band around the declared one: declared T=1; trainer T_hat 1.000000 [...]"


def test_classifier_calls_a_precision_delta_that_survives_replay_expected_numerical(build_run, made_budget):
    """T=1 and no filters: one candidate contract, no replay to run. Semantics is ruled out only by
    probe 6's measured temperature fit on the drifting run, never by the flags."""
    parent = with_flags(build_run("parent", rung="near-aligned", abs_diff=noisy(0.013)))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04)), **{"vllm-quantization": "fp8"})
    runs = {("fp8-rollout", ()): child, ("near-aligned", ()): parent}
    within = ("within", "every boundary within 4x its envelope", None)
    asked = []

    def contract(run):
        asked.append(run.id)
        return ("pass", MEASURED_T)

    judgement = judge_rung(
        KNOBS.rungs["fp8-rollout"],
        KNOBS,
        fetcher(runs),
        lambda run: [],
        contract_check=contract,
        boundary_check=lambda run: within,
        drift_budget=lambda rung_id, runs: made_budget(rung_id, NOT_LOCALISED),
    )
    assert judgement.drift_class == "expected-numerical", judgement.summary()
    assert asked == ["child"] and judgement.evidence["boundary_table"]["run"] == "child"
    assert "T_hat" in judgement.ruled_out["semantic"] and "by construction" not in " ".join(judgement.reasons)
    assert "removes 0%" not in judgement.ruled_out["semantic"] and "removed_fraction" not in judgement.evidence


@pytest.mark.parametrize(
    ("probe", "expected", "words"),
    [
        (("fail", "semantic: the rollout's log-probs follow another temperature than the declared one: T_hat 0.9 [...]"), "semantic", "T_hat 0.9"),
        (("not checked", "temperature not decided: an interval straddles the band's edge: ..."), "undecided", "needs probe 6"),
        (None, "undecided", "needs probe 6"),
    ],
)
def test_single_contract_semantics_follow_the_measured_probe_not_the_flags(build_run, probe, expected, words):
    parent = with_flags(build_run("parent", rung="near-aligned", abs_diff=noisy(0.013)))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04)), **{"vllm-quantization": "fp8"})
    runs = {("fp8-rollout", ()): child, ("near-aligned", ()): parent}
    within = ("within", "every boundary within 4x its envelope", None)
    check = None if probe is None else (lambda run: probe)
    judgement = judge_rung(KNOBS.rungs["fp8-rollout"], KNOBS, fetcher(runs), lambda run: [], contract_check=check, boundary_check=lambda run: within)
    assert judgement.drift_class == expected and words in judgement.reasons[-1], judgement.summary()
    assert "semantic" not in judgement.ruled_out


def test_classifier_decides_numerical_drift_by_the_drift_budget_only(build_run, made_budget):
    parent = with_flags(build_run("parent", rung="near-aligned", abs_diff=noisy(0.013)))
    child = with_flags(build_run("child", rung="fp8-rollout", abs_diff=noisy(0.04)), **{"vllm-quantization": "fp8"})
    runs = {("fp8-rollout", ()): child, ("near-aligned", ()): parent}
    breaks = ("breaks", "first boundary beyond 4x its envelope: logsumexp ...", "logsumexp")
    passes = lambda run: ("pass", MEASURED_T)  # noqa: E731
    asked = []

    def budget(rung_id, runs):
        asked.append((rung_id, [run.id for run in runs]))
        return made_budget(rung_id, LOCALISED, "log-softmax")

    judgement = judge_rung(
        KNOBS.rungs["fp8-rollout"],
        KNOBS,
        fetcher(runs),
        lambda run: [],
        contract_check=passes,
        boundary_check=lambda run: breaks,
        drift_budget=budget,
    )
    assert judgement.drift_class == "candidate-operator" and "log-softmax" in judgement.reasons[-1], judgement.summary()
    assert asked == [("fp8-rollout", ["child"])], "the drifting rung's budget over its own runs"
    # A breaking envelope table alone decides nothing: without the budget the class is undecided.
    judgement = judge_rung(KNOBS.rungs["fp8-rollout"], KNOBS, fetcher(runs), lambda run: [], contract_check=passes, boundary_check=lambda run: breaks)
    assert judgement.drift_class == "undecided" and "needs the drift budget" in judgement.reasons[-1], judgement.summary()


def test_classifier_puts_framework_failures_before_anything_else(build_run):
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013))
    child = with_flags(build_run("child", rung="stale-weights", abs_diff=noisy(0.03)), **{"embedded-inject": "stale-weights:2"})
    runs = {("stale-weights", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(
        KNOBS.rungs["stale-weights"], KNOBS, fetcher(runs), lambda run: ["probe 2 (model state): weight version 3 vs 5"] if run is child else []
    )
    assert judgement.drift_class == "framework" and "probe 2" in judgement.reasons[-1]


def test_classifier_reports_no_class_for_a_delta_inside_the_noise(build_run):
    # Five seeds a side that agree: the seeds' own spread bounds the delta inside the effect of interest.
    runs = {}
    for rung in ("near-aligned", "temperature"):
        for i in range(5):
            run = build_run(f"{rung}-{i}", rung=rung, seed=1234 + i, abs_diff=noisy(0.013 * (1 + 0.005 * (i - 2)), scale=0.02))
            runs[(rung, () if i == 0 else (("seed", 1234 + i),))] = run
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [], replicates=5)
    assert (judgement.observed_direction, judgement.drift_class) == ("flat", "none"), judgement.summary()


def test_one_seed_a_side_carries_the_seed_spread_its_spec_measured(build_run):
    """The same delta of nothing on one seed a side: each side's SE carries what its spec's A/A runs
    measured between seeds (knobs/effects.yaml), so a run's own steps alone cannot show it flat."""
    parent = build_run("parent", rung="near-aligned", abs_diff=noisy(0.013, scale=0.02))
    child = build_run("child", rung="temperature", abs_diff=noisy(0.013, scale=0.02))
    runs = {("temperature", ()): child, ("near-aligned", ()): parent}
    judgement = judge_rung(KNOBS.rungs["temperature"], KNOBS, fetcher(runs), lambda run: [])
    spread = KNOBS.effects.spread("near-aligned").relative_sd
    assert judgement.diff.se > spread * 0.013, judgement.summary()


def decision_line(**fields):
    import json

    return "[2026-11-20 10:00:00] policy.py:88 - rl_kernel.execution_decision " + json.dumps(fields)


def test_ab_rejects_a_candidate_that_fell_back_silently(build_run):
    from harness.experiment.evidence import contract_problems

    baseline = build_run("baseline")
    candidate = build_run(
        "candidate",
        extra_lines=[
            decision_line(
                requested_backend="processed-replay", actual_backend="native", decision="fallback-native", fallback_reason="top-k replay unsupported"
            )
        ],
    )
    candidate.spec.flags["embedded-logprob-operator"] = "fused-linear-logprob"
    problems = contract_problems(baseline, candidate, KNOBS)
    assert any("fell back" in p and "top-k replay unsupported" in p for p in problems), problems


def test_ab_rejects_different_prompts_and_sampling(build_run, tmp_path):
    from harness.experiment.evidence import contract_problems

    baseline, candidate = (
        build_run("baseline"),
        build_run(
            "candidate", extra_lines=[decision_line(requested_backend="processed-replay", actual_backend="processed-replay", decision="optimized")]
        ),
    )
    for run, text in ((baseline, "a"), (candidate, "b")):
        path = tmp_path / f"prompts-{run.id}.jsonl"
        path.write_text(text)
        run.spec.flags["prompt-data"] = str(path)
    candidate.spec.flags.update({"embedded-logprob-operator": "fused-linear-logprob", "rollout-top-p": 0.9})
    problems = contract_problems(baseline, candidate, KNOBS)
    assert any("prompt files differ in content" in p for p in problems), problems
    assert any("sampled-token contract: rollout-top-p" in p for p in problems), problems


def write_operator_calls(run, operator: str, sampler_operator: str | None = None, rollouts: int | None = None) -> None:
    """The run's operator_calls.json as the embedded trainer writes it: `operator` expected and counted
    in the trainer's recompute and training forward and in vLLM's sampler (`sampler_operator` counted there instead)."""
    import json

    from harness.records.operator_calls import FILE, FORMAT

    rollouts = rollouts if rollouts is not None else len({n for n, _ in run.series("train/train_rollout_logprob_abs_diff")})
    count = {"calls": rollouts, "tokens": 100 * rollouts}
    record = {
        "format": FORMAT,
        "rollouts_counted": rollouts,
        "engine_mode": "colocate",
        "expected": [{"side": "trainer", "pass": p, "operator": operator} for p in ("recompute", "training")]
        + [{"side": "rollout", "pass": "sampler", "operator": operator}],
        "trainer": {"process": 1, "passes": {"recompute": {operator: count}, "training": {operator: count}}},
        "rollout": {"process": 1, "passes": {"sampler": {sampler_operator or operator: count}}},
        "problems": [],
    }
    (run.path / FILE).write_text(json.dumps(record))


def _clean_pair(build_run, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": [], "label": "1"}')
    baseline = build_run("baseline")
    candidate = build_run(
        "candidate", extra_lines=[decision_line(requested_backend="processed-replay", actual_backend="processed-replay", decision="optimized")]
    )
    candidate.spec.flags["embedded-logprob-operator"] = "fused-linear-logprob"
    for run in (baseline, candidate):
        run.spec.flags["prompt-data"] = str(prompts)
    return baseline, candidate


def test_ab_accepts_a_clean_pair(build_run, tmp_path):
    from harness.experiment.evidence import contract_problems

    baseline, candidate = _clean_pair(build_run, tmp_path)
    assert candidate.spec.backend == "embedded"
    write_operator_calls(baseline, "native")
    write_operator_calls(candidate, "fused-linear-logprob")
    assert contract_problems(baseline, candidate, KNOBS) == []


def test_ab_rejects_a_candidate_whose_operator_was_not_counted(build_run, tmp_path):
    from harness.experiment.evidence import contract_problems

    baseline, candidate = _clean_pair(build_run, tmp_path)
    write_operator_calls(baseline, "native")
    # The flags and the decision records ask for the operator; vLLM's sampler counted only its own path.
    write_operator_calls(candidate, "fused-linear-logprob", sampler_operator="native")
    problems = contract_problems(baseline, candidate, KNOBS)
    assert any(p.startswith("candidate not executed: rollout sampler counted 0 calls") for p in problems), problems
    (candidate.path / "operator_calls.json").unlink()
    problems = contract_problems(baseline, candidate, KNOBS)
    assert any(p.startswith("candidate not checked:") and "operator_calls.json" in p for p in problems), problems


def test_rung_bounds_come_from_the_rung_file_and_name_the_threshold(build_run):
    from harness.judge.expectations import bound_findings

    floor = KNOBS.rungs["fp32-floor"]
    assert floor.expect.bound_names() == {"max_abs_diff": "fp32_floor_max_abs_diff", "min_abs_diff": "fp32_floor_min_abs_diff"}
    quiet = build_run("quiet", rung="fp32-floor", abs_diff=lambda n: 1.8e-7 + 1e-9 * (n % 3))
    assert bound_findings(floor, quiet, KNOBS) == []
    loud = build_run("loud", rung="fp32-floor", abs_diff=noisy(1.5e-3))
    findings = bound_findings(floor, loud, KNOBS)
    assert len(findings) == 1 and "thresholds.fp32_floor_max_abs_diff" in findings[0] and "expect.max_abs_diff" in findings[0]


def test_near_aligned_that_drifts_over_the_run_breaks_its_trend_bound(build_run):
    from harness.judge.expectations import bound_findings

    rung = KNOBS.rungs["near-aligned"]
    side = [build_run(f"steady{i}", rung="near-aligned", seed=2026 + i, abs_diff=noisy(0.0015 * (1 + 0.02 * i), scale=0.02)) for i in range(5)]
    assert bound_findings(rung, side[0], KNOBS, side=side) == []
    rising = build_run("rising", rung="near-aligned", abs_diff=lambda n: 0.0005 + 0.0001 * n)
    findings = bound_findings(rung, rising, KNOBS, side=[rising, *side[1:]])
    assert any("thresholds.near_aligned_max_rel_trend" in f for f in findings), findings


def test_expectation_findings_check_direction_and_class_against_the_parent(build_run):
    from harness.judge.expectations import expectation_findings
    from harness.judge.ladder import RungJudgement

    rung = KNOBS.rungs["top-p"]
    run = build_run("child", rung="top-p", abs_diff=noisy(0.035))
    as_expected = RungJudgement("top-p", rung.parent, 0.035, observed_direction=rung.expect.direction, drift_class=rung.expect.drift_class)
    assert expectation_findings(rung, as_expected, run, KNOBS) == []
    wrong = RungJudgement("top-p", rung.parent, 0.035, observed_direction="down", drift_class="framework")
    findings = expectation_findings(rung, wrong, run, KNOBS)
    assert len(findings) == 2 and "direction" in findings[0] and "drift class" in findings[1]


def _vime_top_p(build_run):
    parent = with_flags(build_run("parent", rung="near-aligned", backend="vime", abs_diff=noisy(0.013)), **{"rollout-top-p": 1.0})
    child = with_flags(build_run("child", rung="top-p", backend="vime", abs_diff=noisy(0.035)), **{"rollout-top-p": 0.95})
    return child, {("top-p", ()): child, ("near-aligned", ()): parent}


@pytest.mark.parametrize(
    "contract, expected",
    [
        (("fail", "semantic: 12 sampled tokens lie outside the rollout's own top-k/top-p set"), "semantic"),
        (("not checked", "no probe bundle with both sides' log-probs; contract not checked"), "undecided"),
        (("pass", "trainer and rollout follow the same sampling contract"), "undecided"),
        (None, "undecided"),
    ],
)
def test_a_top_p_rung_without_a_replay_run_is_decided_by_probe_6_or_undecided(build_run, contract, expected):
    # VIME and records have no replay run: probe 6 on the dumps decides, never the flag names.
    child, runs = _vime_top_p(build_run)
    check = None if contract is None else (lambda run: contract)
    judgement = judge_rung(KNOBS.rungs["top-p"], KNOBS, fetcher(runs), lambda run: [], None, check)
    assert judgement.observed_direction == "up", judgement.summary()
    assert judgement.drift_class == expected, judgement.summary()
    if expected == "undecided":
        assert "undecided" in judgement.reasons[-1]
    if contract is not None:
        assert judgement.evidence["contract_probe"]["run"] == child.id


def test_near_aligned_stability_is_judged_on_its_side_over_the_seeds(build_run):
    """The reference's stability bound is the side's (its runs at the stage's seeds), not one run's: a
    noisy run among seeds that agree passes, seeds that disagree fail, and the finding names the
    threshold and the per-seed means."""
    from harness.judge.expectations import bound_findings

    rung = KNOBS.rungs["near-aligned"]
    assert rung.expect.bound_names()["max_rel_side_ci_halfwidth"] == "near_aligned_max_rel_side_ci_halfwidth"
    agree = [build_run(f"agree{i}", rung="near-aligned", seed=2026 + i, abs_diff=noisy(0.0012 * (1 + 0.03 * (i - 2)), scale=0.02)) for i in range(5)]
    loud = build_run("loud", rung="near-aligned", seed=2026, abs_diff=lambda n: 0.0012 * (1.8 if n % 2 else 0.2))
    assert bound_findings(rung, loud, KNOBS, side=[loud, *agree[1:]]) == []
    spread = [build_run(f"spread{i}", rung="near-aligned", seed=2026 + i, abs_diff=noisy(0.0012 * (0.3 + 0.35 * i), scale=0.02)) for i in range(5)]
    (finding,) = bound_findings(rung, spread[0], KNOBS, side=spread)
    assert "thresholds.near_aligned_max_rel_side_ci_halfwidth" in finding and "over 5 seed(s)" in finding, finding
