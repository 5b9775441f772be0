"""`python -m harness model import`: four published architectures (tests/data/hf_configs/SOURCES.md)
become model knob files whose flags are the ones VIME's own model scripts set, and every rung
renders an argv that passes the suite's VIME validation on each: dense models with no expert or
all-to-all flags, MoE-only rungs skipped with their reason on a dense model."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.spec import SpecError, load_knobs, render_argv, resolve, validate
from harness.spec.cluster import skip_reason
from harness.spec.model_import import derive, import_model
from harness.spec.models import EXPERT_ONLY_FLAGS

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "data" / "hf_configs"
ALL_CONFIGS = ("qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "llama3.1-8b-instruct", "glm4.5-air", "qwen3-next-80b-a3b")

# The flags VIME's scripts set (vllm-project/vime@b332ffc scripts/models/*.sh), with the scripts'
# defaults taken; the import also sets flags the script leaves to Megatron's defaults only where
# the config.json says so, listed per model below.
QWEN3_8B = {
    "swiglu": True, "num-layers": 36, "hidden-size": 4096, "ffn-hidden-size": 12288, "num-attention-heads": 32,
    "group-query-attention": True, "num-query-groups": 8, "use-rotary-position-embeddings": True, "disable-bias-linear": True,
    "normalization": "RMSNorm", "norm-epsilon": 1e-6, "rotary-base": 1000000, "vocab-size": 151936, "kv-channels": 128,
    "qk-layernorm": True, "untie-embeddings-and-output-weights": True,
}  # fmt: skip
QWEN3_235B = {
    "disable-bias-linear": True, "qk-layernorm": True, "group-query-attention": True, "num-attention-heads": 64,
    "num-query-groups": 4, "kv-channels": 128, "num-layers": 94, "hidden-size": 4096, "ffn-hidden-size": 12288,
    "normalization": "RMSNorm", "position-embedding-type": "rope", "norm-epsilon": 1e-6, "rotary-percent": 1.0, "swiglu": True,
    "untie-embeddings-and-output-weights": True, "vocab-size": 151936, "rotary-base": 1000000, "moe-ffn-hidden-size": 1536,
    "moe-router-score-function": "softmax", "moe-token-dispatcher-type": "alltoall", "moe-router-topk": 8,
    "moe-layer-freq": "[" + ",".join(["1"] * 94) + "]", "num-experts": 128, "moe-grouped-gemm": True, "moe-token-drop-policy": "probs",
    "moe-router-dtype": "fp32", "moe-permute-fusion": True, "moe-aux-loss-coeff": 0,
}  # fmt: skip
DEEPSEEK_V3 = {
    "disable-bias-linear": True, "num-layers": 61, "hidden-size": 7168, "ffn-hidden-size": 18432, "num-attention-heads": 128,
    "kv-channels": 128, "normalization": "RMSNorm", "position-embedding-type": "rope", "norm-epsilon": 1e-6, "swiglu": True,
    "untie-embeddings-and-output-weights": True, "vocab-size": 129280, "multi-latent-attention": True, "q-lora-rank": 1536,
    "kv-lora-rank": 512, "qk-head-dim": 128, "qk-pos-emb-head-dim": 64, "v-head-dim": 128, "qk-layernorm": True,
    "rotary-scaling-factor": 40, "rotary-base": 10000, "mscale": 1.0, "mscale-all-dim": 1.0, "attention-softmax-in-fp32": True,
    "no-rope-fusion": True, "num-experts": 256, "moe-layer-freq": "[0,0,0," + ",".join(["1"] * 58) + "]", "moe-ffn-hidden-size": 2048,
    "moe-router-topk": 8, "moe-shared-expert-intermediate-size": 2048, "moe-router-pre-softmax": True,
    "moe-router-score-function": "sigmoid", "moe-router-enable-expert-bias": True, "moe-router-load-balancing-type": "seq_aux_loss",
    "moe-token-dispatcher-type": "alltoall", "moe-aux-loss-coeff": 0, "moe-router-bias-update-rate": 0, "moe-router-group-topk": 4,
    "moe-router-num-groups": 8, "moe-grouped-gemm": True, "moe-router-topk-scaling-factor": 2.5, "moe-router-dtype": "fp32",
    "moe-permute-fusion": True, "attention-backend": None,
}  # fmt: skip
# llama3.1-8B-Instruct.sh, glm4.5-106B-A12B.sh (b332ffc) and qwen3-next-80B-A3B.sh (40ec17a). The import
# also writes --norm-epsilon for GLM-4.5 (the script leaves Megatron's 1e-5, config.json's value too).
LLAMA_3_1_8B = {
    "swiglu": True, "num-layers": 32, "hidden-size": 4096, "ffn-hidden-size": 14336, "num-attention-heads": 32,
    "group-query-attention": True, "num-query-groups": 8, "max-position-embeddings": 131072, "use-rotary-position-embeddings": True,
    "disable-bias-linear": True, "normalization": "RMSNorm", "norm-epsilon": 1e-5, "rotary-base": 500000, "vocab-size": 128256,
    "kv-channels": 128, "use-rope-scaling": True, "rotary-scaling-factor": 8.0, "untie-embeddings-and-output-weights": True,
}  # fmt: skip
GLM_4_5_AIR = {
    "disable-bias-linear": True, "group-query-attention": True, "num-attention-heads": 96, "num-query-groups": 8, "kv-channels": 128,
    "num-layers": 46, "hidden-size": 4096, "ffn-hidden-size": 10944, "add-qkv-bias": True, "normalization": "RMSNorm",
    "norm-epsilon": 1e-5, "position-embedding-type": "rope", "rotary-percent": 0.5, "swiglu": True,
    "untie-embeddings-and-output-weights": True, "vocab-size": 151552, "rotary-base": 1000000, "moe-ffn-hidden-size": 1408,
    "moe-shared-expert-intermediate-size": 1408, "moe-router-pre-softmax": True, "moe-router-score-function": "sigmoid",
    "moe-router-enable-expert-bias": True, "moe-router-bias-update-rate": 0, "moe-router-load-balancing-type": "seq_aux_loss",
    "moe-token-dispatcher-type": "alltoall", "moe-router-topk": 8, "moe-layer-freq": "[0," + ",".join(["1"] * 45) + "]",
    "num-experts": 128, "moe-grouped-gemm": True, "moe-router-dtype": "fp32", "moe-permute-fusion": True, "moe-aux-loss-coeff": 0,
}  # fmt: skip
QWEN3_NEXT = {
    "spec": ["vime_plugins.models.qwen3_next", "get_qwen3_next_spec"], "disable-bias-linear": True, "qk-layernorm": True,
    "group-query-attention": True, "num-attention-heads": 16, "num-query-groups": 2, "kv-channels": 256, "num-layers": 48,
    "hidden-size": 2048, "ffn-hidden-size": 5120, "use-gated-attention": True, "normalization": "RMSNorm", "apply-layernorm-1p": True,
    "position-embedding-type": "rope", "norm-epsilon": 1e-6, "rotary-percent": 0.25, "swiglu": True,
    "untie-embeddings-and-output-weights": True, "vocab-size": 151936, "rotary-base": 10000000, "moe-ffn-hidden-size": 512,
    "moe-shared-expert-intermediate-size": 512, "moe-router-score-function": "softmax", "moe-token-dispatcher-type": "alltoall",
    "moe-router-topk": 10, "moe-layer-freq": "[" + ",".join(["1"] * 48) + "]", "num-experts": 512, "moe-grouped-gemm": True,
    "moe-token-drop-policy": "probs", "moe-router-dtype": "fp32", "moe-permute-fusion": True, "moe-aux-loss-coeff": 0,
    "attention-output-gate": True, "moe-shared-expert-gate": True,
}  # fmt: skip


def _committed_30b() -> dict:
    return yaml.safe_load((REPO / "knobs" / "models" / "qwen3-30b-a3b.yaml").read_text())["flags"]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("qwen3-8b", QWEN3_8B),
        ("qwen3-30b-a3b", None),
        ("qwen3-235b-a22b", QWEN3_235B),
        ("deepseek-v3", DEEPSEEK_V3),
        ("llama3.1-8b-instruct", LLAMA_3_1_8B),
        ("glm4.5-air", GLM_4_5_AIR),
        ("qwen3-next-80b-a3b", QWEN3_NEXT),
    ],
)
def test_derived_flags_are_the_ones_vimes_model_script_sets(config, expected):
    _, flags = derive(CONFIGS / f"{config}.json")
    values = {name: d.value for name, d in flags.items()}
    expected = expected if expected is not None else _committed_30b()  # the hand-written file, read from the script
    assert values == expected
    assert all(type(values[k]) is type(v) or isinstance(v, float) for k, v in expected.items())
    assert values.get("attention-backend", "kept") == (None if values.get("multi-latent-attention") else "kept")  # MLA: no flash backend
    assert all(d.origin for d in flags.values())


@pytest.fixture(scope="module")
def knobs_with_imports(tmp_path_factory):
    root = tmp_path_factory.mktemp("knobs") / "knobs"
    shutil.copytree(REPO / "knobs", root)
    for config in ALL_CONFIGS:
        import_model(CONFIGS / f"{config}.json", f"imported-{config}", root)
    return root


def _knobs_for_model(root: Path, model: str, tmp_path: Path):
    own = tmp_path / "knobs"
    shutil.copytree(root, own)
    base = own / "base.yaml"
    text = base.read_text()
    assert "  vime: qwen3-30b-a3b\n" in text
    base.write_text(text.replace("  vime: qwen3-30b-a3b\n", f"  vime: {model}\n"))
    return load_knobs(own)


# Models whose training state (16 bytes a parameter) exceeds the seed's stages (8 or 16 GPUs):
# harness/spec/capacity.py refuses them there, and only for that.
TOO_LARGE_FOR_THE_SEEDS_STAGES = ("qwen3-235b-a22b", "deepseek-v3", "glm4.5-air")
DENSE = ("qwen3-8b", "llama3.1-8b-instruct")
# Parallelism a model needs on the seed's stages: Qwen3-Next's 2 key/value groups do not split over TP 4.
SETS = {"qwen3-next-80b-a3b": {"tensor-model-parallel-size": 2}}


@pytest.mark.parametrize("config", ALL_CONFIGS)
def test_every_rung_renders_an_argv_that_passes_vime_validation(knobs_with_imports, tmp_path, config):
    from harness.spec.site import with_settings

    knobs = with_settings(_knobs_for_model(knobs_with_imports, f"imported-{config}", tmp_path), None, SETS.get(config))
    moe = config not in DENSE
    rendered, skipped, refused = 0, [], []
    for rung in knobs.rungs.values():
        for stage, mode in [(s, m) for s in rung.stages for m in knobs.stages[s].modes]:
            reason = skip_reason(knobs, rung, "vime")
            if reason:
                skipped.append((rung.id, reason))
                continue
            spec = resolve(knobs, stage, rung.id, mode, "vime")
            if config in TOO_LARGE_FOR_THE_SEEDS_STAGES:
                with pytest.raises(SpecError) as err:
                    validate(spec, knobs)
                assert all("[rule model-fits-the-stage;" in problem for problem in err.value.problems), err.value.problems
                refused.append((stage, rung.id))
            else:
                validate(spec, knobs)  # raises with one line per problem
            argv = render_argv(spec.flags)
            rendered += 1
            assert "--num-layers" in argv and argv[argv.index("--num-layers") + 1] == str(spec.flags["num-layers"])
            expert = [a for a in argv if a.lstrip("-") in EXPERT_ONLY_FLAGS]
            assert (bool(expert) == moe) and ("--num-experts" in argv) == moe, (rung.id, expert)
    assert rendered >= 8
    assert bool(refused) == (config in TOO_LARGE_FOR_THE_SEEDS_STAGES)
    moe_skips = [rung for rung, reason in skipped if "needs a mixture-of-experts model" in reason]
    assert sorted(set(moe_skips)) == ([] if moe else ["fp8-plus-filters-moe", "routing-replay"])


def test_collection_of_the_ladder_on_a_dense_model_skips_the_moe_rungs_and_keeps_the_rest(knobs_with_imports, tmp_path):
    from fixtures.knobs import case_param, rung_cases

    knobs = _knobs_for_model(knobs_with_imports, "imported-qwen3-8b", tmp_path)
    params, problems = [], []
    for case in rung_cases(knobs, "colocate", "vime"):
        param, found = case_param(knobs, case)
        params.append(param)
        problems += found
    assert problems == []
    skipped = {p.values[0].rung.id: p.marks[-1].kwargs["reason"] for p in params if any(m.name == "skip" for m in p.marks)}
    assert "routing-replay" in skipped and "needs a mixture-of-experts model" in skipped["routing-replay"]
    assert any(not any(m.name == "skip" for m in p.marks) for p in params)


def test_the_committed_model_is_unchanged_by_the_dense_rule():
    knobs = load_knobs(REPO / "knobs")
    spec = resolve(knobs, "p1", "fp8-plus-filters", "colocate", "vime")
    assert spec.flags["vllm-enable-expert-parallel"] is True and spec.flags["vllm-all2all-backend"] == "deepep_high_throughput"


def _cli(*args, cwd=REPO):
    done = subprocess.run([sys.executable, "-m", "harness", "model", "import", *map(str, args)], capture_output=True, text=True, cwd=cwd)
    return done.returncode, done.stdout, done.stderr


def test_cli_writes_the_file_and_bad_input_is_one_line(tmp_path):
    knobs = tmp_path / "knobs"
    code, out, err = _cli(CONFIGS / "qwen3-8b.json", "--name", "my-qwen3", "--knobs", knobs)
    assert code == 0, err
    written = Path(out.strip())
    assert written == knobs / "models" / "my-qwen3.yaml"
    assert "  num-layers: 36  # config.json num_hidden_layers" in written.read_text()
    code, _, err = _cli(CONFIGS / "qwen3-8b.json", "--name", "my-qwen3", "--knobs", knobs)
    assert code == 2 and err.count("\n") == 1 and "exists; choose another --name, or pass --force" in err
    bad = tmp_path / "config.json"
    cases = {
        '{"model_type": "mistral"}': "model_type: expected one of qwen3, qwen3_moe, deepseek_v3, llama, glm4_moe, qwen3_next",
        '{"model_type": "qwen3", "hidden_act": "silu", "num_attention_heads": "32"}': "num_attention_heads: expected an integer, got '32'",
        '{"model_type": "qwen3", "hidden_act": "gelu"}': "hidden_act: expected 'silu'",
        "[1, 2]": "expected a JSON object",
        "{not json": "not readable JSON",
    }
    for text, message in cases.items():
        bad.write_text(text)
        code, _, err = _cli(bad, "--name", "bad", "--knobs", knobs)
        assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err
        assert not (knobs / "models" / "bad.yaml").exists()
    code, _, err = _cli(tmp_path / "missing.json", "--name", "x", "--knobs", knobs)
    assert code == 2 and "no such file" in err
    code, _, err = _cli(CONFIGS / "qwen3-8b.json", "--name", "Bad Name", "--knobs", knobs)
    assert code == 2 and "--name 'Bad Name'" in err
    with pytest.raises(SpecError):
        import_model(CONFIGS / "qwen3-8b.json", "my-qwen3", knobs)
