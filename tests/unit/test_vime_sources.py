"""The flag table and the model files name where their values were read, and the miniature's
model file says what the embedded trainer really builds. A spec VIME would reject stops pytest
at collection, one line per problem."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.recipes import MODEL_RECIPES
from harness.spec import load_knobs
from harness.spec.models import load_model
from harness.spec.vime_flags import load_flag_table

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def test_the_flag_table_names_a_commit_or_version_for_every_source():
    table = load_flag_table(KNOBS.root, KNOBS.base.vime_line)
    for name, source in table.sources.items():
        if source.repo:
            assert COMMIT.match(source.commit), f"sources.{name}: commit {source.commit!r}"
            assert source.path, f"sources.{name}: path missing"
        else:
            assert source.package and source.version, f"sources.{name}: neither a repo@commit nor a package version"
    assert sum(table.counts.values()) == len(table.flags)
    assert (REPO_ROOT / table.generated_by).is_file()


def test_the_table_knows_each_parser_part_it_claims():
    table = load_flag_table(KNOBS.root, "rl-align")
    owners = {name: flag.parsers[0] for name, flag in table.flags.items()}
    # One flag per part, as VIME defines it: pre-parser, VIME's groups, vLLM side, router, Megatron.
    assert owners["train-backend"] == "pre"
    assert owners["num-gpus-per-node"] == "vime" and table.flags["num-gpus-per-node"].default == 8
    assert owners["vllm-logprobs-mode"] == "vllm"
    assert owners["router-policy"] == "router"
    assert owners["moe-router-topk"] == "megatron"
    # VIME sets these engine arguments itself and does not re-expose them as --vllm-*.
    assert "vllm-tensor-parallel-size" not in table.flags and "vllm-seed" not in table.flags
    assert "vllm-router-policy" not in table.flags


def test_model_files_name_their_source():
    cluster = load_model(KNOBS.root, KNOBS.base.model.vime)
    assert cluster.source.repo == "RL-Align/vime" and COMMIT.match(cluster.source.commit)
    assert cluster.source.path == "scripts/models/qwen3-30B-A3B.sh"
    assert cluster.rendered_on == ["vime", "records"]


def test_the_miniature_model_file_is_the_recipe_it_builds():
    model = load_model(KNOBS.root, KNOBS.base.model.embedded)
    recipe = MODEL_RECIPES[model.id]
    flags = model.flags
    assert model.rendered_on == []  # the embedded trainer reads its architecture from the checkpoint
    assert (flags["num-layers"], flags["hidden-size"], flags["ffn-hidden-size"]) == (recipe.num_layers, recipe.hidden_size, recipe.intermediate_size)
    assert (flags["num-attention-heads"], flags["num-query-groups"], flags["kv-channels"]) == (recipe.num_heads, recipe.num_kv_heads, recipe.head_dim)
    assert flags["vocab-size"] == recipe.vocab_size and flags["rotary-base"] == recipe.rope_theta
    assert flags["untie-embeddings-and-output-weights"] is (not recipe.tie_embeddings)
    assert recipe.num_experts == 0 and not any(name.startswith("moe-") for name in flags)


def test_a_spec_vime_would_reject_stops_collection_with_one_line(tmp_path):
    knobs = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, knobs)
    base = knobs / "base.yaml"
    base.write_text(base.read_text().replace("  balance-data: true\n", "  balance-dataa: true\n", 1))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/ladder",
            "--backend",
            "vime",
            "--knobs",
            str(knobs),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    (problem,) = [line.strip() for line in output.splitlines() if "balance-dataa" in line]
    assert "base.yaml: flags.balance-dataa: VIME (rl-align) has no flag --balance-dataa" in problem, problem
    assert "did you mean --balance-data?" in problem and "[rule vime-flag-table;" in problem, problem


def test_the_tables_note_where_the_two_vime_lines_differ():
    rl_align, upstream = load_flag_table(KNOBS.root, "rl-align"), load_flag_table(KNOBS.root, "upstream")
    # Upstream lets the trainer's precision decide vLLM's dtype and keeps the seed's router flag.
    assert rl_align.flags["vllm-dtype"].upstream == "absent" and "vllm-dtype" not in upstream.flags
    assert "vllm-router-policy" in rl_align.only_upstream
    assert upstream.flags["vllm-router-policy"].rl_align == "absent"


def test_the_top_p_replay_check_is_rl_align_only(tmp_path):
    from harness.spec import SpecError, resolve, validate

    knobs = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, knobs)
    flags = {"rollout-top-k": -1}
    try:
        validate(resolve(KNOBS, "p1", "fp8-plus-filters", "colocate", "vime", flags), KNOBS)
        raise AssertionError("RL-Align accepted top-p 0.95 without top-k")
    except SpecError as err:
        assert any("[rule top-p-replay-needs-top-k;" in p for p in err.problems), err.problems
    base = knobs / "base.yaml"
    base.write_text(base.read_text().replace("vime-line: rl-align", "vime-line: upstream"))
    upstream = load_knobs(knobs)
    # Upstream has no --vllm-dtype (its trainer precision decides), so the ladder's dtype knob is
    # dropped here; the top-p check must not fire.
    spec = resolve(upstream, "p1", "fp8-plus-filters", "colocate", "vime", {**flags, "vllm-dtype": None})
    validate(spec, upstream)
