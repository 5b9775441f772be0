"""The boundary table, built to pass and built to fail (no runs): capture bundles made from the
reference operations themselves on a small random Qwen3, one with a fault at a named boundary; the
class decided from probes and table; the numerical controls' operators."""

from __future__ import annotations

import math

import pytest
import torch

from harness import DEFAULT_KNOBS_DIR
from harness.attribution import boundary_ops as ops
from harness.attribution.boundaries import BoundaryTable, boundary_table, captured_drift, classify, own_broken, own_figures
from harness.attribution.boundary_ops import Precision, Qwen3Weights
from harness.attribution.probes import PROBE_NAMES, ProbeVerdict
from harness.embedded.capture import FORMAT, CaptureProblem, read_capture, write_capture
from harness.embedded.flags import FlagError
from harness.embedded.injections import parse
from harness.embedded.numeric_faults import logsumexp_accumulated, logsumexp_bf16_accumulated, row_parallel_reordered
from harness.spec import load_knobs

pytestmark = pytest.mark.attribution

CONFIG = {
    "num_layers": 2,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "vocab_size": 64,
    "tie_word_embeddings": False,
}
K = 4.0
MIN_COVERAGE = 0.5


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny operands: a second thread only waits at its barrier on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _weights(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    c, H = CONFIG, CONFIG["hidden_size"]
    q, kv, ffn = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"], 48

    def w(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    state = {"model.embed_tokens.weight": w(c["vocab_size"], H, scale=1.0), "model.norm.weight": 1 + w(H), "lm_head.weight": w(c["vocab_size"], H)}
    for i in range(c["num_layers"]):
        p = f"model.layers.{i}."
        state.update(
            {
                p + "input_layernorm.weight": 1 + w(H),
                p + "post_attention_layernorm.weight": 1 + w(H),
                p + "self_attn.q_proj.weight": w(q, H),
                p + "self_attn.k_proj.weight": w(kv, H),
                p + "self_attn.v_proj.weight": w(kv, H),
                p + "self_attn.o_proj.weight": w(H, q),
                p + "self_attn.q_norm.weight": 1 + w(c["head_dim"]),
                p + "self_attn.k_norm.weight": 1 + w(c["head_dim"]),
                p + "mlp.gate_proj.weight": w(ffn, H),
                p + "mlp.up_proj.weight": w(ffn, H),
                p + "mlp.down_proj.weight": w(H, ffn),
            }
        )
    return state


def _side(weights: Qwen3Weights, tokens: list[int], prompt_len: int, prec: Precision, fault: str | None = None, lse=None) -> dict:
    """One side's capture, computed by the reference ops at `prec`; `fault` adds a 1e-3 error at that boundary;
    `lse(logits)`: the side's log-sum-exp in place of the reference's (its log-probs follow it)."""

    def hit(name, t):
        return (t.double() + 1e-3 * torch.sign(t.double())).to(t.dtype) if name == fault else t

    out = {"embedding": hit("embedding", weights.get("model.embed_tokens.weight", prec)[torch.tensor(tokens[:-1])])}
    stream = out["embedding"]
    for i in range(CONFIG["num_layers"]):
        a = out[f"layer.{i}.attention"] = hit(f"layer.{i}.attention", ops.attention(stream, weights, i, prec))
        m = out[f"layer.{i}.mlp"] = hit(f"layer.{i}.mlp", ops.mlp(ops.residual(stream, a, prec=prec), weights, i, prec))
        stream = out[f"layer.{i}.output"] = ops.residual(stream, a, m, prec=prec)
    out["final_norm"] = ops.rms_norm(stream, weights.get("model.norm.weight", ops.FP64), CONFIG["rms_norm_eps"], prec)
    cols = list(range(prompt_len - 1, len(tokens) - 1))
    targets = torch.tensor(tokens[prompt_len:])
    out["logits"] = ops.lm_head(out["final_norm"][cols], weights, prec)
    out["targets"] = targets
    out["logsumexp"] = hit("logsumexp", ops.logsumexp(out["logits"], 1.0, prec) if lse is None else lse(out["logits"]).to(torch.float32))
    sel = ops.selected_logprob(out["logits"], targets, 1.0, prec)
    out["selected_logprob"] = sel - (out["logsumexp"] - ops.logsumexp(out["logits"], 1.0, prec))
    out["processed_logprob"] = out["recorded_logprob"] = out["selected_logprob"]
    return out


def _bundle(
    tmp_path,
    fault: str | None = None,
    rollout_dtype: str = "float32",
    trainer_down=None,
    logged_scale: float | None = 1.0,
    operator: str | None = None,
    operator_error: float = 0.0,
    rollout_lse=None,
    k_own: float | None = None,
    k: float = K,
) -> BoundaryTable:
    """``trainer_down(x, weight, prec)``: the trainer side's MLP output projection, in place of the
    reference's one GEMM (the table itself always measures with the reference). ``logged_scale``:
    the run's logged abs-diff as a multiple of what the capture carries (1: coverage 1; None: no
    logged value). ``operator``: a registry operator both sides ran for the selected log-prob, on
    each side's own LM-head operands, as the embedded capture records it (``operator_error`` added
    to the rollout's: a faulty operator kernel). ``rollout_lse``: the rollout's log-sum-exp operator
    (a numerical control's). ``k_own``: the own-input check's multiple (None: measured, not judged)."""
    state = _weights()
    weights = Qwen3Weights(state, CONFIG)
    tokens, prompt_len = [(7 * i + 3) % CONFIG["vocab_size"] for i in range(24)], 10
    policy = {
        **CONFIG,
        "train_dtype": "float32",
        "rollout_dtype": rollout_dtype,
        "rollout_quantization": None,
        "temperature": 1.0,
        "top_k": -1,
        "top_p": 1.0,
    }
    from harness.embedded.capture import CapturedSample

    with pytest.MonkeyPatch.context() as patch:
        if trainer_down is not None:
            reference = ops.linear

            def linear(x, w, name, prec, quantised=True):
                return (
                    trainer_down(x.to(prec.dtype), w.get(name, prec), prec)
                    if name.endswith("mlp.down_proj.weight")
                    else reference(x, w, name, prec, quantised)
                )

            patch.setattr(ops, "linear", linear)
        trainer = _side(weights, tokens, prompt_len, Precision("float32"))
    rollout = _side(weights, tokens, prompt_len, Precision(rollout_dtype), fault, rollout_lse)
    if operator is not None:
        from harness.operators import registry

        op, cols = registry.get(operator), list(range(prompt_len - 1, len(tokens) - 1))
        for side, prec, error in ((trainer, Precision("float32"), 0.0), (rollout, Precision(rollout_dtype), operator_error)):
            head = weights.get("lm_head.weight", prec)
            side["selected_logprob"] = op.selected_logprobs(side["final_norm"][cols], head, side["targets"], 1.0).double() + error
        policy["logprob_operator"] = {"trainer": operator, "rollout": operator}
    sample = CapturedSample(0, tokens, prompt_len, len(tokens) - prompt_len, trainer, rollout)
    path = write_capture(tmp_path / "dumps" / "capture_2.pt", 2, [sample], policy, state, [])
    logged = None if logged_scale is None else {2: captured_drift(read_capture(path))["captured"] * logged_scale}
    return boundary_table(tmp_path, k, logged=logged, min_coverage=MIN_COVERAGE, k_own=k_own)


def test_aligned_sides_stay_within_every_envelope(tmp_path):
    table = _bundle(tmp_path)
    assert table.status == "checked" and table.localised is None, table.markdown()
    assert {r.boundary for r in table.rows} >= {"embedding", "layer.1.attention", "final_norm", "logsumexp", "processed_logprob"}


def test_bf16_rollout_against_fp32_trainer_is_within_its_declared_envelope(tmp_path):
    table = _bundle(tmp_path, rollout_dtype="bfloat16")
    assert table.localised is None, table.markdown()
    attention = next(r for r in table.rows if r.boundary == "layer.0.attention")
    assert attention.divergence["mean"] > 1e-4  # bf16 drift is there, and explained by the envelope


@pytest.mark.parametrize("fault", ["layer.0.attention", "layer.1.mlp", "logsumexp"])
def test_a_fault_is_localised_to_its_boundary(tmp_path, fault):
    table = _bundle(tmp_path, fault=fault)
    assert table.localised is not None and table.localised.boundary == fault, table.markdown()
    assert table.localised.ratio > K


def test_a_reordered_tp_reduction_breaks_its_envelope_only_outside_the_declared_precision(tmp_path):
    """The trainer-tp-reduce-bf16 control's operator: the MLP output projection as 4 row-parallel
    ranks reduce it, last rank first. With fp32 partials (another order only) it stays inside the
    fp32 envelope; with bf16 partials it is localised at the first MLP."""
    reordered = _bundle(tmp_path / "fp32", trainer_down=lambda x, w, prec: row_parallel_reordered(x, w, torch.float32))
    assert reordered.localised is None, reordered.markdown()
    mlp = next(r for r in reordered.rows if r.boundary == "layer.0.mlp")
    assert mlp.divergence["mean"] > 0  # the order did change the bits
    bf16 = _bundle(tmp_path / "bf16", trainer_down=lambda x, w, prec: row_parallel_reordered(x, w, torch.bfloat16))
    assert bf16.localised is not None and bf16.localised.boundary == "layer.0.mlp", bf16.markdown()
    assert bf16.localised.ratio > K


def test_the_selected_log_prob_is_judged_with_the_operator_each_side_ran(tmp_path):
    """With a registry operator recorded for both sides, the selected_logprob row holds the
    operator's outputs and its envelope is the LM head and log-softmax at the operator's precision
    on each side's own operands: a bf16 rollout stays within it, a faulty operator is localised
    there, before any later row."""
    bf16 = _bundle(tmp_path / "bf16", rollout_dtype="bfloat16", operator="fused-linear-logprob")
    assert bf16.localised is None, bf16.markdown()
    assert bf16.precisions["selected_logprob"]["rollout"].startswith("fused-linear-logprob (float32"), bf16.precisions
    selected = next(r for r in bf16.rows if r.boundary == "selected_logprob")
    assert selected.divergence["mean"] > 0 and selected.envelope["mean"] > 0
    faulty = _bundle(tmp_path / "faulty", operator="fused-linear-logprob", operator_error=1e-3)
    assert faulty.localised is not None and faulty.localised.boundary == "selected_logprob", faulty.markdown()
    native = _bundle(tmp_path / "native")
    assert native.precisions["selected_logprob"].startswith("each side's own log-softmax")


def _probe(number: int, status: str) -> ProbeVerdict:
    return ProbeVerdict(number=number, name=PROBE_NAMES[number], status=status, verdict=f"probe {number} {status}")


def test_class_follows_the_evidence(tmp_path):
    within, broken = _bundle(tmp_path / "a"), _bundle(tmp_path / "b", fault="layer.0.attention")
    ok = [_probe(1, "pass"), _probe(2, "pass")]
    assert classify(within, ok, _probe(6, "pass")).drift_class == "expected-numerical"
    decided = classify(broken, ok, _probe(6, "pass"))
    assert (decided.drift_class, decided.decided_by) == ("candidate-operator", "boundary layer.0.attention")
    assert classify(broken, [_probe(1, "fail"), _probe(2, "pass")], _probe(6, "pass")).drift_class == "framework"
    assert classify(broken, ok, _probe(6, "fail")).drift_class == "semantic"
    unchecked = classify(broken, ok, _probe(6, "not checked"))
    assert unchecked.drift_class == "undecided" and unchecked.label.startswith("undecided: needs probe 6")
    missing = classify(boundary_table(tmp_path / "none", K), ok, _probe(6, "pass"))
    assert missing.drift_class == "undecided" and "boundary table" in missing.label


def test_a_capture_of_every_sample_without_a_contract_carries_the_drift_by_construction_and_says_so(tmp_path):
    """The capture holds every sample of its step and the rollout's processed log-prob is its selected
    one: captured drift / logged drift is 1 by identity, not a measurement. The table says so rather
    than reporting a coverage it could not have missed; a capture of part of the step is measured."""
    table = _bundle(tmp_path, rollout_dtype="bfloat16")
    logged = {2: table.coverage["per_step"][2]["logged"]}
    whole = boundary_table(tmp_path, K, logged=logged, min_coverage=MIN_COVERAGE, samples_per_step=1)
    assert whole.coverage["by_construction"] and whole.decides
    assert "by construction" in whole.coverage["reason"] and "coverage not measured" in whole.coverage["reason"]
    part = boundary_table(tmp_path, K, logged=logged, min_coverage=MIN_COVERAGE, samples_per_step=32)
    assert not part.coverage["by_construction"] and part.coverage["reason"].startswith("capture coverage 1"), part.coverage["reason"]


def test_a_capture_that_does_not_carry_the_logged_drift_classes_nothing(tmp_path):
    """Coverage = captured selected-log-prob drift / logged abs-diff of the same step: a table whose
    tokens carry a tenth of the drift being classified decides nothing, and says the number."""
    ok = [_probe(1, "pass"), _probe(2, "pass")]
    carried = _bundle(tmp_path / "carried", rollout_dtype="bfloat16")
    assert carried.coverage["per_step"][2]["coverage"] == pytest.approx(1.0) and carried.decides
    assert classify(carried, ok, _probe(6, "pass")).drift_class == "expected-numerical"
    low = _bundle(tmp_path / "low", rollout_dtype="bfloat16", logged_scale=10.0)
    assert low.coverage["per_step"][2]["coverage"] == pytest.approx(0.1) and not low.decides
    decided = classify(low, ok, _probe(6, "pass"))
    assert decided.drift_class == "undecided" and "capture coverage 0.1 at rollout 2 < 0.5" in decided.label, decided.label
    unmeasured = _bundle(tmp_path / "unmeasured", rollout_dtype="bfloat16", logged_scale=None)
    assert not unmeasured.decides and "coverage not measured" in unmeasured.reason
    assert classify(unmeasured, ok, _probe(6, "pass")).drift_class == "undecided"


def test_probes_3_and_4_are_measured_from_both_engines_tensors(tmp_path):
    """Each engine's own logits, log-sum-exp and selected logit at the captured positions (the
    table's LM-head rows) make probes 3 and 4 measured; a table that cannot decide leaves them not measured."""
    from harness.attribution.probes import measured_from_table

    aligned = _bundle(tmp_path / "aligned", rollout_dtype="bfloat16")
    assert measured_from_table(3, aligned).status == "pass" and measured_from_table(4, aligned).status == "pass"
    lse = _bundle(tmp_path / "lse", fault="logsumexp")
    probe4 = measured_from_table(4, lse)
    assert probe4.status == "fail" and probe4.boundary == "logsumexp", probe4.verdict
    assert measured_from_table(3, lse).status == "pass"  # the logits themselves agree
    low = _bundle(tmp_path / "low", rollout_dtype="bfloat16", logged_scale=10.0)
    assert measured_from_table(3, low) is None and measured_from_table(4, low) is None


def test_a_nan_row_is_not_comparable_never_within(tmp_path):
    table = _bundle(tmp_path, rollout_dtype="bfloat16")
    table.rows[3].ratio = float("nan")
    assert not table.decides and table.not_comparable == [table.rows[3].boundary] and "not comparable" in table.reason
    assert classify(table, [_probe(1, "pass"), _probe(2, "pass")], _probe(6, "pass")).drift_class == "undecided"


def test_own_ratio_is_each_sides_residual_over_its_declared_precision_pooled():
    """The own-input check's arithmetic on small tensors: per side, mean |y - f64(x)| over mean
    |f_declared(x) - f64(x)|, pooled over every piece (mean over mean, as the cross-engine rows),
    not a mean of per-piece ratios; a side beyond k_own breaks, none without k_own."""
    t = torch.tensor
    own = own_figures(
        {
            "trainer": ([t([1e-3, 3e-3])], [t([1e-3, 1e-3])]),
            "rollout": ([t([0.0, 0.0]), t([2e-3])], [t([1e-3, 1e-3]), t([1e-3])]),
        }
    )
    assert own["trainer"]["ratio"] == pytest.approx(2.0)
    assert own["rollout"]["ratio"] == pytest.approx(2.0 / 3.0)  # (0 + 0 + 2e-3) / 3 over 1e-3; per piece it would read 1.0
    assert own["trainer"]["residual"]["mean"] == pytest.approx(2e-3) and own["trainer"]["envelope"]["max"] == pytest.approx(1e-3)
    assert own_broken(own, 1.5) == ["trainer"] and own_broken(own, 0.5) == ["trainer", "rollout"] and own_broken(own, None) == []
    # both exact (an embedding lookup of representable weights): 0; residual with no envelope: inf, which breaks
    assert own_figures({"trainer": ([t([0.0])], [t([0.0])])})["trainer"]["ratio"] == 0.0
    inf = own_figures({"rollout": ([t([1e-6])], [t([0.0])])})
    assert inf["rollout"]["ratio"] == float("inf") and own_broken(inf, 1e9) == ["rollout"]
    # a NaN is never within: its ratio is NaN (BoundaryTable.not_comparable), and it breaks nothing silently
    nan = own_figures({"trainer": ([t([float("nan"), 1.0])], [t([1.0, 1.0])])})
    assert math.isnan(nan["trainer"]["ratio"])


def test_sides_computed_at_their_declared_precision_sit_at_one_on_their_own_inputs(tmp_path):
    """Each side made by the reference ops at its declared precision: its own residual is its own
    envelope, so every own ratio is 1 (0 where the declared op is exact), and no side breaks."""
    table = _bundle(tmp_path, rollout_dtype="bfloat16", k_own=1.01)
    assert table.localised is None and table.k_own == 1.01, table.markdown()
    for row in table.rows:
        assert set(row.own) == {"trainer", "rollout"}, row.boundary
        for side, o in row.own.items():
            assert o["ratio"] == 0.0 or o["ratio"] == pytest.approx(1.0, abs=1e-9), (row.boundary, side, o)


def test_a_side_that_ran_a_registry_operator_has_no_own_check_on_its_processed_log_prob(tmp_path):
    """Under a registry operator a side forms its processed log-prob from the operator's raw log-prob
    on the LM head's fp32 operands, not from its captured rounded logits: fp64 of the row's op on
    those logits is not what it computed from (on the P3 candidate-operator runs that read 2e5x its
    own envelope), so that own check is not measured; its selected_logprob own check (operator on
    the operands) stays."""
    table = _bundle(
        tmp_path, operator="fused-linear-logprob", k_own=4.1
    )  # fp32 sides: the synthetic bf16 rollout's operator reads a bf16-rounded head the capture does not hold
    rows = {r.boundary: r for r in table.rows}
    assert rows["processed_logprob"].own == {} and set(rows["selected_logprob"].own) == {"trainer", "rollout"}
    assert table.localised is None, table.markdown()


@pytest.mark.parametrize("bits", [7, 3])
def test_the_own_input_check_localises_a_fault_the_bf16_envelope_hides_and_names_its_side(tmp_path, bits):
    """A bf16 rollout whose log-sum-exp keeps its running sum at N mantissa bits (the rollout-lse
    control): at today's k the cross-engine envelope (the bf16 logits' own divergence) explains it
    at 7 bits; the rollout's own residual against fp64 on its own logits is thousands of times what
    its declared precision (fp32 accumulation on bf16 logits) does, so the table localises it at
    logsumexp and names the rollout."""
    knobs = load_knobs(DEFAULT_KNOBS_DIR)
    k, k_own = knobs.threshold("boundary_envelope_k"), knobs.threshold("boundary_own_k")
    faulty = _bundle(tmp_path, rollout_dtype="bfloat16", rollout_lse=lambda x: logsumexp_accumulated(x, bits), k=k, k_own=k_own)
    hit = faulty.localised
    assert hit is not None and hit.boundary == "logsumexp" and faulty.localised_side == "rollout", faulty.markdown()
    assert hit.own_breaks == ["rollout"] and hit.own["rollout"]["ratio"] > k_own and hit.own["trainer"]["ratio"] <= k_own
    assert all(not r.breaks for r in faulty.rows[: faulty.rows.index(hit)])  # nothing upstream
    assert "rollout's own inputs" in faulty.reason and "(rollout)" in faulty.markdown()
    record = faulty.to_json()
    assert record["localised"] == "logsumexp" and record["localised_side"] == "rollout" and record["k_own"] == k_own and record["k"] == k
    row = next(r for r in record["rows"] if r["boundary"] == "logsumexp")
    assert row["breaks"] and row["own_breaks"] == ["rollout"] and row["own"]["rollout"]["ratio"] == hit.own["rollout"]["ratio"]
    assert {"divergence", "envelope", "ratio", "elements", "cross_breaks"} <= set(row)  # the keys the page already reads stay
    if bits == 7:  # the cross-engine rule alone does not see it
        assert not hit.cross_breaks
        assert boundary_table(tmp_path, k, min_coverage=None).localised is None


def test_bad_capture_is_one_line(tmp_path):
    bad = tmp_path / "capture_0.pt"
    torch.save({"format": "something-else"}, bad)
    with pytest.raises(CaptureProblem, match=f"capture_0.pt: key 'format': expected '{FORMAT}'"):
        read_capture(bad)


def test_bf16_accumulated_logsumexp_is_a_real_error():
    logits = torch.randn(64, 512, generator=torch.Generator().manual_seed(1)) * 3
    error = (logsumexp_bf16_accumulated(logits).double() - torch.logsumexp(logits.double(), -1)).abs()
    assert 1e-4 < float(error.mean()) < 0.1  # far beyond fp32 (~1e-7), within bf16's reach
    assert parse("rollout-lse-bf16,trainer-softmax-bf16").names() == ["rollout-lse-bf16", "trainer-softmax-bf16"]
    assert parse("trainer-tp-reduce-bf16").names() == ["trainer-tp-reduce-bf16"]


def test_sized_controls_parse_and_name_themselves():
    """``*-bits:N`` sizes a rounding control (N = 7 is the bf16 control and keeps its name, so its
    records and run ids stay as they were); ``rollout-fp8-weight-scale:F`` takes a factor; a bad
    size is one line naming the item and what was expected."""
    assert parse("rollout-lse-bits:7") == parse("rollout-lse-bf16")
    assert parse("trainer-softmax-bits:7").names() == ["trainer-softmax-bf16"]
    faults = parse("trainer-tp-reduce-bits:3,rollout-lse-bits:12,rollout-fp8-weight-scale:0.5")
    assert (faults.trainer_tp_reduce_bits, faults.rollout_lse_bits, faults.rollout_fp8_weight_scale) == (3, 12, 0.5)
    assert faults.names() == ["rollout-lse-bits:12", "trainer-tp-reduce-bits:3", "rollout-fp8-weight-scale:0.5"]
    assert parse(",".join(faults.names())) == faults
    for bad, expected in [
        ("rollout-lse-bits", "rollout-lse-bits:N with N mantissa bits in 1..23"),
        ("trainer-softmax-bits:0", "trainer-softmax-bits:N with N mantissa bits in 1..23"),
        ("trainer-tp-reduce-bits:24", "trainer-tp-reduce-bits:N with N mantissa bits in 1..23"),
        ("rollout-fp8-weight-scale:1", "rollout-fp8-weight-scale:F with F a positive scale factor other than 1"),
        ("rollout-fp8-weight-scale:-0.5", "rollout-fp8-weight-scale:F with F a positive scale factor other than 1"),
        ("rollout-lse-bf16:3", "rollout-lse-bf16 takes no argument"),
    ]:
        with pytest.raises(FlagError, match=f"--embedded-inject {bad}: .*" + expected.replace(".", r"\.")):
            parse(bad)


def test_captured_tensors_cross_the_servers_json_bit_exact():
    """The rollout side comes back from the engine's worker as plain data (the non-colocate server's
    /collective_rpc answers JSON): every dtype and shape, bit for bit."""
    import json

    from harness.embedded.capture import decode_tensors, encode_tensors

    g = torch.Generator().manual_seed(3)
    tensors = {"bf16": torch.randn(5, 7, generator=g).to(torch.bfloat16), "fp32": torch.randn(3, 2, 4, generator=g), "long": torch.arange(6)}
    back = decode_tensors(json.loads(json.dumps(encode_tensors(tensors))))
    assert all(back[k].dtype == t.dtype and torch.equal(back[k], t) for k, t in tensors.items())


def test_command_line_bad_input_is_one_line(tmp_path, capsys):
    from harness.attribution.boundaries import main

    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tmp_path), "--k", "0"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "no such run directory" in errors[0] and "--k 0.0" in errors[1]
    _bundle(tmp_path)
    assert main([str(tmp_path)]) == 0  # k from knobs/thresholds.yaml
    # a directory with no run records: no logged abs-diff, so the coverage is not measured and said
    out = capsys.readouterr().out
    assert out.startswith("boundary table classes nothing: capture coverage not measured") and "| layer.0.mlp |" in out, out[:400]
