"""The lever table (knobs/levers.yaml) against the embedded switches it names, and the switches'
own arithmetic where it can be held without an engine: the trainer's fp8 operands equal the
rollout's, the gather lever changes nothing, the flags that turn switches on."""

from __future__ import annotations

import pytest
import torch

from harness import DEFAULT_KNOBS_DIR
from harness.embedded import flags as flag_table
from harness.embedded import fp8
from harness.embedded import true_on_policy as levers
from harness.embedded.settings import from_flags
from harness.spec import SpecError, load_knobs
from harness.spec.levers import LeverFile

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
BASE = [
    "--hf-checkpoint",
    "embedded://model/qwen3-tiny",
    "--prompt-data",
    "embedded://data/arith-dapo",
    "--num-rollout",
    "1",
    "--rollout-batch-size",
    "2",
]


def test_every_switch_is_one_levers_and_every_lever_names_real_switches():
    table = KNOBS.levers
    named = [s for lever in table.levers.values() for s in lever.switches]
    assert sorted(named) == sorted(levers.SWITCHES), "each embedded switch belongs to exactly one lever of knobs/levers.yaml"
    for name, lever in table.levers.items():
        sides = {levers.SWITCHES[s][0] for s in lever.switches}
        assert lever.side == (sides.pop() if len(sides) == 1 else "both") or lever.kind == "contract", name


def test_a_lever_table_with_a_switch_twice_or_a_wrong_side_is_one_error_naming_it(tmp_path):
    data = KNOBS.levers.model_dump()
    data["levers"]["qk-norm"]["switches"] = ["trainer-engine-input-norm"]
    with pytest.raises(ValueError, match="already lever 'input-norm'"):
        LeverFile.model_validate(data)
    data = KNOBS.levers.model_dump()
    data["levers"]["rotary"]["side"] = "trainer"
    with pytest.raises(ValueError, match="switches change the engine side"):
        LeverFile.model_validate(data)
    knobs = tmp_path / "knobs"
    knobs.mkdir()
    for path in DEFAULT_KNOBS_DIR.rglob("*.yaml"):
        target = knobs / path.relative_to(DEFAULT_KNOBS_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    text = (
        (knobs / "levers.yaml")
        .read_text()
        .replace("rungs: [near-aligned,", "rungs: [near-aligend,")
        .replace("    near-aligned:\n      verdict", "    near-aligend:\n      verdict")
    )
    (knobs / "levers.yaml").write_text(text)
    with pytest.raises(SpecError, match=r"levers.yaml: budget.rungs: .*'near-aligend'"):
        load_knobs(knobs)


def test_the_flags_turn_on_the_true_on_policy_set_less_its_without_plus_the_levers_given():
    def on(*extra):
        values, _ = flag_table.parse(BASE + list(extra))
        return from_flags(values).levers

    assert on() == frozenset()
    assert on("--embedded-true-on-policy") == frozenset(levers.TRUE_ON_POLICY)
    assert on("--embedded-true-on-policy", "--embedded-true-on-policy-without", "trainer-engine-norm") == frozenset(levers.TRUE_ON_POLICY) - set(
        levers.GROUPS["trainer-engine-norm"]
    )
    assert on("--embedded-levers", "trainer-engine-qk-norm,trainer-fp8-weights") == {"trainer-engine-qk-norm", "trainer-fp8-weights"}
    with pytest.raises(flag_table.FlagError, match="unknown lever 'trainer-engine-qk'"):
        on("--embedded-levers", "trainer-engine-qk")
    with pytest.raises(flag_table.FlagError, match="needs vLLM's sampler in the trainer's process"):
        on("--embedded-levers", "engine-reference-filter")


def test_the_trainers_fp8_weights_are_the_rollouts_quantised_hf_tensors():
    """The trainer's fused QKV and gate/up weights, quantised by the lever, equal the weights the
    fp8 engine receives (each HF tensor quantised in its own 128x128 blocks), mapped back."""
    from harness.embedded.megatron_model import hf_to_megatron, megatron_to_hf
    from harness.embedded.true_on_policy.trainer_kernels import rollout_weight

    class Config:
        num_attention_heads, num_key_value_heads, head_dim, hidden_size = 4, 2, 96, 64
        num_hidden_layers, tie_word_embeddings, num_experts = 1, False, 0

    torch.manual_seed(0)
    hf = {
        "model.embed_tokens.weight": torch.randn(32, 64),
        "model.norm.weight": torch.ones(64),
        "lm_head.weight": torch.randn(32, 64),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(4 * 96, 64),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(2 * 96, 64) * 3,
        "model.layers.0.self_attn.v_proj.weight": torch.randn(2 * 96, 64) / 3,
        "model.layers.0.self_attn.o_proj.weight": torch.randn(64, 4 * 96),
        "model.layers.0.self_attn.q_norm.weight": torch.ones(96),
        "model.layers.0.self_attn.k_norm.weight": torch.ones(96),
        "model.layers.0.input_layernorm.weight": torch.ones(64),
        "model.layers.0.post_attention_layernorm.weight": torch.ones(64),
        "model.layers.0.mlp.gate_proj.weight": torch.randn(200, 64),
        "model.layers.0.mlp.up_proj.weight": torch.randn(200, 64) * 5,
        "model.layers.0.mlp.down_proj.weight": torch.randn(64, 200),
    }
    hf = {k: v.to(torch.bfloat16) for k, v in hf.items()}
    megatron, rollout = hf_to_megatron(hf, Config, 1, 0), hf_to_megatron(fp8.quantize_state_dict(hf), Config, 1, 0)

    class Layer:
        _embedded_split = ("qkv", 4, 2, 96)

    class FC1:
        _embedded_split = ("gate-up",)

    assert torch.equal(
        rollout_weight(Layer(), megatron["decoder.layers.0.self_attention.linear_qkv.weight"]),
        rollout["decoder.layers.0.self_attention.linear_qkv.weight"],
    )
    assert torch.equal(rollout_weight(FC1(), megatron["decoder.layers.0.mlp.linear_fc1.weight"]), rollout["decoder.layers.0.mlp.linear_fc1.weight"])
    assert torch.equal(
        rollout_weight(object(), megatron["decoder.layers.0.mlp.linear_fc2.weight"]), rollout["decoder.layers.0.mlp.linear_fc2.weight"]
    )
    assert megatron_to_hf([rollout], Config)["model.layers.0.self_attn.k_proj.weight"].equal(
        fp8.quantize_weight_blockwise(hf["model.layers.0.self_attn.k_proj.weight"])
    )


def test_the_gather_lever_reads_the_same_number_megatrons_cross_entropy_does():
    """Gathering the target from the full log-prob row subtracts the same two fp32 numbers that
    Megatron's predicted-logit path subtracts: the lever exists, and changes nothing, bit for bit."""
    from harness.embedded import logprobs as lp
    from harness.embedded.megatron_cpu import init_distributed, init_model_parallel

    init_distributed(0, 1, str(__import__("tempfile").mkdtemp()) + "/store")
    init_model_parallel(1, 0)
    torch.manual_seed(1)
    logits = (torch.randn(300, 512) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 512, (300,))
    native = lp.vocab_parallel_logprobs(logits, targets, 1.0)
    row = lp.vocab_parallel_logprobs(logits, targets, 1.0, gather_row=True)
    assert torch.equal(native, row)


def test_every_budget_expectation_is_what_the_design_seeds_measured():
    """An expected budget answer is one tools/budget_design.py measured on the design seeds and sized
    within the budget's sample (budget.seeds): a rung's verdict by its deciding lever's seeds_needed, a
    ruled-out lever by its own (lever_seeds_needed); a reported verdict is one the design could not size
    there. The design seeds never overlap the budget's judging seeds."""
    measured = KNOBS.levers.measured.get("rungs") or {}
    budget = KNOBS.levers.budget
    design_seeds = set(KNOBS.levers.measured.get("seeds") or [])
    assert not design_seeds & set(range(budget.judging_seed, budget.judging_seed + budget.seeds)), "design and judging seeds overlap"

    def affordable(needed) -> bool:
        return isinstance(needed, int) and needed <= budget.seeds

    for rung, expected in budget.expect.items():
        design = measured.get(rung)
        assert design is not None, f"knobs/levers.yaml: budget.expect.{rung} has no measurement below the marker (tools/budget_design.py --write)"
        for lever in expected.ruled_out:
            needed = design["lever_seeds_needed"].get(lever)
            assert design["add_one"][lever][0] < KNOBS.threshold(budget.min_localised_share.threshold), f"{rung}: {lever} above the share"
            assert affordable(needed), f"{rung}: {lever} ruled out, but the design needs {needed} seeds for it (budget.seeds {budget.seeds})"
        if expected.verdict == "reported":
            assert not affordable(design["seeds_needed"]), f"{rung}: the design decides it in {design['seeds_needed']} seeds: expect it"
            continue
        assert design["verdict"] == expected.verdict, f"{rung}: expected {expected.verdict}, the design measured {design['verdict']}"
        assert expected.boundary is None or expected.boundary in design["localised"], f"{rung}: {expected.boundary} not localised on the design seeds"
        assert affordable(design["seeds_needed"]), f"{rung}: the design needs {design['seeds_needed']} seeds, the budget has {budget.seeds}"
