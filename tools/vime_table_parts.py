"""Inputs of tools/build_vime_flag_table.py that are not a parser: a VIME checkout's files and
commit, the flags VIME's Megatron patch adds, and the parts of the current table kept when they
cannot be rebuilt here.

A user refreshes the table from their own checkout (`--vime-root`); the checkout's commit is what
the table records. VIME's image applies `docker/patch/latest/megatron.patch` to Megatron-LM before
VIME runs, and that patch adds command-line flags (`--use-gated-attention` for Qwen3-Next): they
are Megatron's flags on a VIME cluster, so the table has them, marked as the patch's.
"""

from __future__ import annotations

import ast
import subprocess
import textwrap
from pathlib import Path

# Where a VIME checkout keeps what the table is built from.
VIME_ARGS = "vime/utils/arguments.py"
VLLM_SIDE_ARGS = "vime/backends/vllm_utils/arguments.py"
MEGATRON_PATCH = "docker/patch/latest/megatron.patch"
MEGATRON_ARGUMENTS_FILE = "megatron/training/arguments.py"
# The fields of a table entry that describe how a parser reads the flag.
ENTRY_KEYS = ("kind", "type", "choices", "default", "required")


def checkout_commit(root: Path) -> str | None:
    """The checkout's HEAD commit, or None when it is not a git checkout (or git is missing)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None


def checkout_files(root: Path) -> dict[str, Path | None]:
    """The checkout's files the table is built from (None for one the checkout does not have)."""
    found = {}
    for key, relative in (("vime", VIME_ARGS), ("vllm-side", VLLM_SIDE_ARGS), ("megatron-patch", MEGATRON_PATCH)):
        path = Path(root) / relative
        found[key] = path if path.is_file() else None
    if found["vime"] is None:
        raise SystemExit(f"--vime-root {root}: no {VIME_ARGS} there; expected a VIME checkout (the directory holding train.py)")
    return found


def _added_blocks(patch_text: str, target: str) -> list[str]:
    """Runs of consecutive added lines (`+...`) in the hunks of one file of a unified diff."""
    blocks, current, in_target = [], [], False
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            in_target = line.endswith(f" b/{target}")
        if not in_target or line.startswith("+++"):
            if current:
                blocks.append(current)
                current = []
            continue
        if line.startswith("+"):
            current.append(line[1:])
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return ["\n".join(block) for block in blocks]


def megatron_patch_arguments(patch: Path, entry_from_kwargs, literal) -> tuple[dict[str, dict], list[str]]:
    """Flags the patch adds to Megatron-LM's argument parser, and one warning per added block that
    looks like an add_argument call but does not parse on its own."""
    found: dict[str, dict] = {}
    warnings = []
    for block in _added_blocks(patch.read_text(), MEGATRON_ARGUMENTS_FILE):
        if "add_argument(" not in block:
            continue
        try:
            tree = ast.parse(textwrap.dedent(block))
        except SyntaxError as err:
            warnings.append(f"{patch}: an added add_argument block does not parse alone ({err.msg}); its flags are not in the table")
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
                continue
            kwargs = {k.arg: literal(k.value) for k in node.keywords if k.arg and k.arg != "help"}
            entry = {**entry_from_kwargs(kwargs), "parser": "megatron", "note": "added by VIME's Megatron patch"}
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                    found.setdefault(arg.value[2:], dict(entry))
    return found, warnings


def kept_part(table: dict, part: str) -> dict[str, dict]:
    """A part of an existing table, as the builder's parts are shaped: every flag that `part`'s
    parser reads, with the entry's kind, type, choices, default and note."""
    kept = {}
    for name, entry in table.get("flags", {}).items():
        if part not in entry.get("parsers", ()):
            continue
        kept[name] = {key: entry[key] for key in ENTRY_KEYS if key in entry}
        kept[name]["parser"] = part
        if part == "megatron" and "Megatron patch" in entry.get("note", ""):
            kept[name]["note"] = entry["note"]
    return kept
