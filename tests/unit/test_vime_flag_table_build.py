"""Refreshing the flag table from a user's VIME checkout is one command, and the table records the
commit it read. A checkout here is a small git repository with VIME's files in their places; the
parts this machine cannot rebuild (no Megatron-LM tree, no vllm-router) are kept, and said so."""

from __future__ import annotations

import shutil
import subprocess
import sys

import yaml

from harness import REPO_ROOT

TOOL = REPO_ROOT / "tools" / "build_vime_flag_table.py"

VIME_ARGUMENTS = """
import argparse

CHOICES = ("off", "auto", "strict")


def add_rl_kernel_arguments(parser):
    parser.add_argument("--rlk-fast", choices=CHOICES, default=None)
    parser.add_argument("--enable-rl-kernel", action="store_true", default=False)
    parser.add_argument("--brand-new-flag", type=int, default=3)
    return parser


def get_vime_extra_args_provider(add_custom_arguments=None):
    def add_vime_arguments(parser):
        def add_data_arguments(parser):
            parser.add_argument("--rollout-batch-size", type=int, required=True)
            return parser

        return parser

    return add_vime_arguments


def _pre_parse_mode():
    temp_parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    temp_parser.add_argument("--train-backend", type=str, choices=["megatron"], default="megatron")
"""

MEGATRON_PATCH = """diff --git a/megatron/training/arguments.py b/megatron/training/arguments.py
--- a/megatron/training/arguments.py
+++ b/megatron/training/arguments.py
@@ -1701,6 +1704,8 @@ def _add_network_size_args(parser):
     group.add_argument('--make-vocab-size-divisible-by', type=int, default=128)
+    group.add_argument('--use-gated-attention', action='store_true',
+                       help='If set, use gated attention as in Qwen3Next')
     group.add_argument('--openai-gelu', action='store_true')
"""


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)


def test_the_table_is_refreshed_from_a_checkout_and_records_its_commit(tmp_path):
    checkout = tmp_path / "vime"
    (checkout / "vime" / "utils").mkdir(parents=True)
    (checkout / "vime" / "utils" / "arguments.py").write_text(VIME_ARGUMENTS)
    (checkout / "docker" / "patch" / "latest").mkdir(parents=True)
    (checkout / "docker" / "patch" / "latest" / "megatron.patch").write_text(MEGATRON_PATCH)
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "vime")
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    table_dir = tmp_path / "knobs" / "vime"
    table_dir.mkdir(parents=True)
    for line in ("rl-align", "upstream"):
        shutil.copy(REPO_ROOT / "knobs" / "vime" / f"flags-{line}.yaml", table_dir / f"flags-{line}.yaml")
    out = table_dir / "flags-rl-align.yaml"
    done = subprocess.run(
        [sys.executable, str(TOOL), "--line", "rl-align", "--vime-root", str(checkout), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = yaml.safe_load(out.read_text())
    assert table["vime-commit"] == head and table["sources"]["vime"]["commit"] == head
    assert table["sources"]["megatron-patch"]["commit"] == head and "use-gated-attention" in table["sources"]["megatron-patch"]["note"]
    flags = table["flags"]
    assert flags["brand-new-flag"] == {"parsers": ["vime"], "kind": "valued", "type": "int", "default": 3, "upstream": "absent"}
    assert flags["rlk-fast"]["choices"] == ["off", "auto", "strict"]  # a module-level constant, resolved
    assert flags["use-gated-attention"]["note"] == "added by VIME's Megatron patch"
    # No Megatron-LM, vllm-router or vLLM side file here: those parts are the table's, kept and said so.
    assert table["kept"] == ["megatron", "router", "vllm"]
    assert flags["tensor-model-parallel-size"]["parsers"] == ["megatron"] and flags["vllm-logprobs-mode"]["parsers"] == ["vllm"]
    assert "rollout-top-p" not in flags  # a VIME flag the checkout does not define is gone with it
