"""The mitigation rungs' parts without a run: TIS's loss against hand arithmetic, the flags' bad
values (one line each, at spec validation and in the trainer's parser), the MoE root rung's
resolution, and the A/B gate's treatment of a mitigation candidate."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness import DEFAULT_KNOBS_DIR
from harness.embedded.flags import FlagError, parse
from harness.embedded.grpo import LossConfig, policy_loss
from harness.embedded.settings import from_flags
from harness.spec import load_knobs
from harness.spec.errors import SpecError

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def test_tis_loss_and_metrics_equal_the_hand_computed_reference():
    """Two samples, three tokens; clip 2.0 and clip-low 0.95 so both ends of the clamp bite.
    Every reference figure is written out per token from VIME's definition (loss.py
    vanilla_tis_function): w = exp(old - rollout), loss = max(-A r, -A clip(r)) x clamp(w)."""
    cur = [torch.tensor([-1.0, -0.5]), torch.tensor([-0.2])]
    old = [torch.tensor([-1.1, -0.4]), torch.tensor([-0.6])]
    roll = [torch.tensor([-1.0, -1.2]), torch.tensor([-0.7])]
    adv = [0.5, -1.0]
    masks = [torch.ones(2), torch.ones(1)]
    cfg = LossConfig(eps_clip=0.2, eps_clip_high=0.2, use_tis=True, tis_clip=2.0, tis_clip_low=0.95, per_token=False)
    loss, metrics = policy_loss(cur, old, roll, adv, masks, cfg)

    # sample 0, token 0: r = e^0.1 inside [0.8, 1.2]; w = e^-0.1 = 0.905 < 0.95 -> 0.95 (clipped)
    l00 = -0.5 * math.exp(0.1) * 0.95
    # sample 0, token 1: r = e^-0.1 inside; w = e^0.8 = 2.226 > 2 -> 2.0 (clipped)
    l01 = -0.5 * math.exp(-0.1) * 2.0
    # sample 1, token 0: A < 0, r = e^0.4 = 1.49 > 1.2: max(1.49, 1.2) keeps the unclipped term; w = e^0.1 inside
    l10 = 1.0 * math.exp(0.4) * math.exp(0.1)
    expected = {
        "pg_loss": ((l00 + l01) / 2 + l10) / 2,
        "tis": ((math.exp(-0.1) + math.exp(0.8)) / 2 + math.exp(0.1)) / 2,
        "tis_clipfrac": ((1 + 1) / 2 + 0) / 2,
        "tis_abs": ((abs(math.exp(-0.1) - 1) + abs(math.exp(0.8) - 1)) / 2 + abs(math.exp(0.1) - 1)) / 2,
        "ois": ((math.exp(0.1) + math.exp(-0.1)) / 2 + math.exp(0.4)) / 2,
        "pg_clipfrac": 0.0,
    }
    assert float(loss) == pytest.approx(expected["pg_loss"], rel=1e-6)
    for name, value in expected.items():
        assert float(metrics[name]) == pytest.approx(value, rel=1e-6, abs=1e-9), name


def test_tis_weight_is_a_constant_of_the_gradient():
    """The weight comes from the recompute and the rollout, never from the graph: d loss / d cur
    equals the un-weighted gradient times clamp(w)."""
    cur = torch.tensor([-1.0, -0.5], requires_grad=True)
    old, roll = torch.tensor([-1.1, -0.4]), torch.tensor([-1.0, -1.2])
    base = LossConfig(eps_clip=0.2, eps_clip_high=0.2, use_tis=False, tis_clip=2.0, tis_clip_low=0.0, per_token=True)
    tis = LossConfig(eps_clip=0.2, eps_clip_high=0.2, use_tis=True, tis_clip=2.0, tis_clip_low=0.0, per_token=True)
    (g_plain,) = torch.autograd.grad(policy_loss([cur], [old], [roll], [0.5], [torch.ones(2)], base)[0], cur)
    (g_tis,) = torch.autograd.grad(policy_loss([cur], [old], [roll], [0.5], [torch.ones(2)], tis)[0], cur)
    assert torch.allclose(g_tis, g_plain * torch.exp(old - roll).clamp(0.0, 2.0))


MINIMAL = ["--hf-checkpoint", "m", "--prompt-data", "d", "--num-rollout", "1", "--rollout-batch-size", "1"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--use-tis", "--tis-clip", "0"], "--tis-clip 0.0: must be > 0 with --use-tis"),
        (["--use-tis", "--tis-clip", "-1"], "--tis-clip -1.0: must be > 0 with --use-tis"),
        (["--use-tis", "--tis-clip", "2", "--tis-clip-low", "3"], "--tis-clip-low 3.0: must be >= 0 and below --tis-clip 2.0"),
    ],
)
def test_the_trainer_refuses_bad_tis_values_in_one_line(extra, expected):
    with pytest.raises(FlagError) as err:
        from_flags(parse(MINIMAL + extra)[0])
    assert expected in str(err.value) and "\n" not in str(err.value)


def _problems(rung: str, backend: str, **overrides) -> list[str]:
    from harness.spec import resolve as resolve_spec
    from harness.spec import validate

    try:
        validate(resolve_spec(KNOBS, stage="p1", rung=rung, mode="colocate", backend=backend, overrides=overrides), KNOBS)
    except SpecError as err:
        return err.problems
    return []


@pytest.mark.parametrize("backend", ["embedded", "vime"])
@pytest.mark.parametrize("value", [0, -0.5])
def test_spec_validation_refuses_tis_clip_at_or_below_zero(backend, value):
    problems = _problems("tis", backend, **{"tis-clip": value})
    assert len(problems) == 1, problems
    assert "rule tis-clip-in-range" in problems[0] and f"--tis-clip {value}: must be a number > 0" in problems[0]


def test_spec_validation_refuses_routing_replay_on_the_dense_model():
    problems = _problems("fp8-plus-filters", "embedded", **{"use-rollout-routing-replay": True})
    assert len(problems) == 1, problems
    assert "rule routing-replay-needs-experts" in problems[0] and "embedded://model/qwen3-tiny is dense" in problems[0]


def test_the_mitigation_rungs_validate_on_both_backends():
    for rung in ("tis", "fp8-plus-filters-moe", "routing-replay"):
        for backend in ("embedded", "vime"):
            assert _problems(rung, backend) == [], (rung, backend)


def test_the_moe_root_resolves_as_the_baseline_but_for_the_checkpoint():
    """fp8-plus-filters-moe must be fp8-plus-filters on the MoE model and nothing else, so
    routing-replay's parent is the baseline; on VIME (already MoE) it is the baseline exactly."""
    from harness.spec import resolve as resolve_spec

    def flags(rung, backend):
        return dict(resolve_spec(KNOBS, stage="p1", rung=rung, mode="colocate", backend=backend).flags)

    dense, moe = flags("fp8-plus-filters", "embedded"), flags("fp8-plus-filters-moe", "embedded")
    assert {k for k in dense.keys() | moe.keys() if dense.get(k) != moe.get(k)} == {"hf-checkpoint"}
    assert moe["hf-checkpoint"] == "embedded://model/qwen3-moe-tiny"
    assert flags("fp8-plus-filters", "vime") == flags("fp8-plus-filters-moe", "vime")


def _decision_line(**fields):
    return "[2026-11-20 10:00:00] policy.py:88 - rl_kernel.execution_decision " + json.dumps(fields)


def _pair(build_run, tmp_path, **candidate_flags):
    from harness.experiment.evidence import contract_problems
    from harness.judge.ab import what_changed

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": [], "label": "1"}')
    baseline = build_run("baseline")
    candidate = build_run("candidate", extra_lines=[_decision_line(requested_backend="native", actual_backend="native", decision="native")])
    candidate.spec.flags.update(candidate_flags)
    for run in (baseline, candidate):
        run.spec.flags["prompt-data"] = str(prompts)
    return contract_problems(baseline, candidate, KNOBS), what_changed(baseline, candidate, KNOBS)


def test_ab_accepts_a_mitigation_candidate_and_names_what_it_changed(build_run, tmp_path):
    problems, changed = _pair(build_run, tmp_path, **{"use-tis": True, "tis-clip": 2.0})
    assert problems == []
    assert changed == ["mitigation (loss and trajectory, not the sampled tokens): tis-clip None -> 2.0, use-tis None -> True"]


def test_ab_still_rejects_a_mitigation_that_comes_with_a_sampling_change(build_run, tmp_path):
    problems, _ = _pair(build_run, tmp_path, **{"use-rollout-routing-replay": True, "rollout-top-p": 0.9})
    assert any("sampled-token contract: rollout-top-p" in p for p in problems), problems


def test_the_audit_names_the_experts_that_computed_each_token_and_groups_drift_by_routing_agreement():
    """Response token j's log-prob comes from the logits at prompt + j - 1: its experts are that row
    of the [tokens - 1, layers, top-k] routing. One flipped expert on token 2 carries the drift."""
    import numpy as np

    from harness.attribution.audit import TokenRows
    from harness.attribution.probe_context import correlations, token_context
    from harness.attribution.run_dumps import SamplePair, Side

    rollout_routing = np.tile(np.array([[1, 0], [3, 2]]), (6, 1, 1))  # 3 prompt + 4 response tokens - 1
    trainer_routing = np.sort(rollout_routing, axis=-1)
    trainer_routing[3 + 2 - 1, 1] = [2, 4]
    pair = SamplePair(
        rollout_id=0,
        position=0,
        index=0,
        rollout=Side({"prompt_ids": np.arange(3), "response_ids": np.arange(4), "experts": rollout_routing}),
        train=Side({"loss_mask": np.ones(4), "experts": trainer_routing}),
    )
    tokens = TokenRows()
    tokens.dlogp.append(np.array([0.01, -0.02, 0.5, 0.01]))
    tokens.where.append((pair, np.arange(4)))

    worst = token_context(pair, 2, 0.5, None)
    assert (worst["experts"], worst["trainer_experts"], worst["routing_agrees"]) == ([[0, 1], [2, 3]], [[0, 1], [2, 4]], False)
    assert token_context(pair, 3, 0.01, None)["routing_agrees"] is True
    groups = correlations(tokens)["routing_agrees"]
    assert groups["tokens_by_group"] == {"0": 1, "1": 3}
    assert groups["mean_abs_dlogp_by_group"]["0"] == pytest.approx(0.5)
    assert groups["mean_abs_dlogp_by_group"]["1"] == pytest.approx((0.01 + 0.02 + 0.01) / 3)


def test_routed_capture_files_each_rows_under_its_request_and_refuses_gaps():
    """The engine-side capture without an engine: two sibling completions (n=2) of request "7",
    a 3-token prompt each, one prefill step and one decode step, two MoE layers, top-2. Rows follow
    the runner's batch order; each request's rows start at its computed-token count."""
    from types import SimpleNamespace

    import numpy as np

    from harness.embedded.routed_capture import CaptureError, RoutedExpertsCapture

    class Router:
        top_k = 2

        def set_capture_fn(self, fn):
            self.fn = fn

    routers = [Router(), Router()]
    modules = [(f"model.layers.{i}.mlp.experts", SimpleNamespace(router=r)) for i, r in enumerate(routers)]
    runner = SimpleNamespace(model=SimpleNamespace(named_modules=lambda: modules), input_batch=None)

    def forward(scheduled, computed, rows_per_layer):
        runner.input_batch = SimpleNamespace(req_ids=list(scheduled), num_computed_tokens_cpu=np.array(computed))
        steps.append(SimpleNamespace(num_scheduled_tokens=scheduled))
        runner.execute_model(steps[-1])
        for router, rows in zip(routers, rows_per_layer):
            router.fn(torch.tensor(rows))

    steps = []
    runner.execute_model = lambda scheduler_output: None
    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(
            engine_core=SimpleNamespace(
                engine_core=SimpleNamespace(
                    model_executor=SimpleNamespace(driver_worker=SimpleNamespace(worker=SimpleNamespace(model_runner=runner)))
                )
            )
        )
    )
    capture = RoutedExpertsCapture(llm)
    a, b = "0_7-ab12", "1_7-ab12"
    layer0 = [[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7]]  # a's 3 prompt rows, then b's
    forward({a: 3, b: 3}, [0, 0], [layer0, [[7 - x for x in r] for r in layer0]])
    forward({a: 1, b: 1}, [3, 3], [[[3, 4], [0, 7]], [[4, 3], [7, 0]]])
    routed = capture.take("7", 1, 2, forwarded=4)  # completion 1 = b: 3 prompt rows + 1 decode row
    assert routed.shape == (4, 2, 2)
    assert routed[:, 0].tolist() == [[4, 5], [5, 6], [6, 7], [0, 7]]
    assert routed[:, 1].tolist() == [[3, 2], [2, 1], [1, 0], [7, 0]]
    with pytest.raises(CaptureError, match="1 of 5 forwarded tokens"):
        capture.take("7", 0, 2, forwarded=5)  # a's fifth token was never forwarded
