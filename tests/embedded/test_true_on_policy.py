"""True on-policy (--embedded-true-on-policy): the parts against the engine's own ops, the gradient
through the shared kernels against Megatron's native path, and the ladder's true-on-policy runs
(P1: bf16 with filters replayed; and fp32 at temperature 0.8) exactly zero at every step, with
every layer boundary of both engines bitwise equal.

Bounds come from knobs/thresholds.yaml by name; the zero expectations from the rung file.
"""

from __future__ import annotations

import pytest
import torch

from harness.embedded.true_on_policy.engine_settings import rounded_residual_fused_add_rms_norm
from harness.embedded.true_on_policy.layer_spec import EngineRMSNorm, kernel_attention

FP32_WITH_TEMPERATURE = {"bf16": None, "vllm-dtype": "float32", "rollout-temperature": 0.8}


class _Config:
    def __init__(self, dtype):
        self.params_dtype = dtype
        self.sequence_parallel = False
        self.tensor_model_parallel_size = 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_compute_as_the_engines_ops(dtype):
    """EngineRMSNorm is vLLM's rms_norm bit for bit; Megatron's residual add then EngineRMSNorm is
    the engine's registered fused add + norm bit for bit (residual rounded before the norm)."""
    from vllm.ir.ops.layernorm import rms_norm

    g = torch.Generator().manual_seed(3)
    x, residual = (torch.randn(37, 64, generator=g) * 4).to(dtype), torch.randn(37, 64, generator=g).to(dtype)
    norm = EngineRMSNorm(_Config(dtype), 64, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64, generator=g) + 0.5)
        assert torch.equal(norm(x), rms_norm.impls["native"].impl_fn(x, norm.weight, 1e-6))
        engine_out, engine_residual = rounded_residual_fused_add_rms_norm(x, residual, norm.weight, 1e-6)
        summed = residual + x  # Megatron's bias-dropout-add in the model dtype
        assert torch.equal(engine_residual, summed)
        assert torch.equal(engine_out, norm(summed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_attention_rows_do_not_depend_on_their_neighbours(dtype):
    """The kernel the trainer shares with the engine: a row's result is the same alone or beside
    others, and a prefix of a sequence gives the prefix of its result (decode = prefill)."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(40, 3, 4, 32, generator=g).to(dtype)
    k, v = torch.randn(40, 3, 2, 32, generator=g).to(dtype), torch.randn(40, 3, 2, 32, generator=g).to(dtype)
    full = kernel_attention(q, k, v, 32**-0.5)
    assert torch.equal(kernel_attention(q[:, 1:2], k[:, 1:2], v[:, 1:2], 32**-0.5), full[:, 1:2])
    assert torch.equal(kernel_attention(q[:17], k[:17], v[:17], 32**-0.5), full[:17])
    reference = torch.nn.functional.scaled_dot_product_attention(
        q.permute(1, 2, 0, 3).float(),
        k.repeat_interleave(2, 2).permute(1, 2, 0, 3).float(),
        v.repeat_interleave(2, 2).permute(1, 2, 0, 3).float(),
        is_causal=True,
    )
    assert (full.float() - reference.permute(2, 0, 1, 3).reshape(40, 3, -1)).abs().max() < (1e-5 if dtype == torch.float32 else 3e-2)


@pytest.fixture(scope="module")
def gradients(tmp_path_factory):
    """Parameter gradients of one PPO-like loss on the same weights and tokens: Megatron's native
    path and the true-on-policy path, in fp32 and bf16 (and native fp32 as the reference)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from harness.embedded import logprobs as lp
    from harness.embedded.factory import ensure_model
    from harness.embedded.megatron_cpu import causal_mask, init_distributed, init_model_parallel, on_cpu
    from harness.embedded.megatron_model import build_gpt, hf_to_megatron, load_into
    from harness.embedded.true_on_policy.logprobs import engine_logprobs

    path = ensure_model("qwen3-tiny")
    config, hf_state = AutoConfig.from_pretrained(path), load_file(str(path / "model.safetensors"))
    init_distributed(0, 1, str(tmp_path_factory.mktemp("store") / "store"))
    init_model_parallel(1, 0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 300, (4, 40), generator=g)
    targets, advantages = torch.roll(ids, -1, 1).reshape(-1), torch.randn(4 * 40, generator=g)
    out = {}
    for bf16 in (False, True):
        for true_on_policy in (False, True):
            model = build_gpt(config, bf16=bf16, tp=1, true_on_policy=true_on_policy)
            load_into(model, hf_to_megatron(hf_state, config, 1, 0))
            with on_cpu():
                logits = model(ids, torch.arange(40).expand(4, -1), causal_mask(40)).reshape(4 * 40, -1)
            if true_on_policy:
                values, _ = engine_logprobs(logits, targets, 1.0, -1, 1.0, replay=False)
            else:
                values = lp.vocab_parallel_logprobs(logits, targets, 1.0)
            (-(values * advantages).mean()).backward()
            out[("bf16" if bf16 else "fp32", true_on_policy)] = {n: p.grad.float().clone() for n, p in model.named_parameters()}
    return out


def _worst_relative(a: dict, b: dict) -> tuple[float, str]:
    return max(((float((a[n] - b[n]).norm() / a[n].norm()), n) for n in a), key=lambda x: x[0])


def test_fp32_gradients_through_the_shared_kernels_match_the_native_path(gradients, thresholds):
    worst, name = _worst_relative(gradients[("fp32", False)], gradients[("fp32", True)])
    assert worst <= thresholds["true_on_policy_grad_max_rel_diff_fp32"], f"{name}: relative gradient difference {worst:.3g}"


def test_bf16_gradients_through_the_shared_kernels_are_no_further_from_fp32_than_native_bf16(gradients, thresholds):
    reference = gradients[("fp32", False)]
    native, _ = _worst_relative(reference, gradients[("bf16", False)])
    shared, name = _worst_relative(reference, gradients[("bf16", True)])
    limit = thresholds["true_on_policy_grad_bf16_max_ratio_to_native"]
    assert shared <= limit * native, f"{name}: {shared:.3g} from the fp32 gradient, native bf16 {native:.3g} (limit {limit}x)"


# ---------------------------------------------------------------- the ladder's 30-step P1 runs
RUNS = {
    "bf16-top-p-top-k-replayed": {},  # the rung as written
    "fp32-temperature-0.8": FP32_WITH_TEMPERATURE,
}


def _finished(run) -> None:
    state = run.status.state if run.status else "unknown"
    assert state == "finished", f"run {run.id} is {state}: {run.status.failure if run.status else ''}"


@pytest.mark.p1
@pytest.mark.parametrize("variant", list(RUNS))
def test_abs_diff_and_ppo_kl_are_exactly_zero_at_every_step(get_run, knobs, variant):
    from harness.judge.exact_zero import exactly_zero_findings

    rung = knobs.rungs["true-on-policy"]
    run = get_run("p1", rung.id, "colocate", **RUNS[variant])
    _finished(run)
    assert len(run.steps()) == int(run.spec.flags["num-rollout"]), run.steps()
    findings = exactly_zero_findings(rung, run)
    assert not findings, "\n  ".join(findings)


@pytest.mark.p1
@pytest.mark.parametrize("variant", list(RUNS))
def test_every_layer_boundary_is_bitwise_equal(get_run, variant):
    """Both engines' tensors, captured at rollouts 2, 12 and 22 for the probe samples (the
    recompute against a vLLM prefill on the same tokens), torch.equal at every boundary; the
    failure names the first boundary that is not."""
    from harness.attribution.bitwise_gates import first_unequal, run_gates

    run = get_run("p1", "true-on-policy", "colocate", **RUNS[variant])
    _finished(run)
    gates, missing = run_gates(run.path / "dumps")
    assert not missing, "; ".join(missing)
    assert gates, f"run {run.id}: no boundary was captured"
    first = first_unequal(gates)
    assert first is None, f"run {run.id}: first boundary not bitwise equal: {first.describe()}"


@pytest.mark.p1
def test_the_gates_fail_where_the_levers_are_off(get_run):
    """The control: the parent rung (near-aligned, the same bf16 model without the levers) has a
    first unequal boundary, so an all-equal table above is the levers' doing, not a blind gate."""
    from harness.attribution.bitwise_gates import first_unequal, run_gates

    run = get_run("p1", "near-aligned", "colocate")
    _finished(run)
    gates, _ = run_gates(run.path / "dumps")
    assert gates and first_unequal(gates) is not None, f"run {run.id}: near-aligned shows no unequal boundary"


# ---------------------------------------------------------------- training still trains: reward
@pytest.mark.p3
def test_reward_is_within_the_native_runs_aa_band(get_run, knobs, pytestconfig):
    """The P3 A/B's runs (knobs/ab.yaml: the pair's baseline, and candidates.true-on-policy: the
    same rung with the levers and the replay on; the same resolved specs, so the same runs): the
    native run's mean reward and true on-policy's differ by no more than the native run's own A/A
    band (its halves). Same prompts, seed and sampling contract: only the log-prob path differs."""
    from harness.judge import ab
    from harness.records.metric_names import RAW_REWARD

    mode, pair, candidate = pytestconfig.getoption("--mode"), knobs.ab.pair, knobs.ab.candidates["true-on-policy"]
    if pytestconfig.getoption("--backend") not in candidate.backends:
        pytest.skip(f"knobs/ab.yaml candidates.true-on-policy.backends: {candidate.backends}")
    native = get_run(pair.stage, pair.baseline, mode)
    true_on_policy = get_run(pair.stage, pair.baseline, mode, **candidate.set)
    answer = ab.within_aa_band(native, true_on_policy, RAW_REWARD, knobs)
    print(answer.message)
    assert answer.passed, answer.message
