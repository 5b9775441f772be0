"""Build knobs/vime/flags-<line>.yaml: every flag the target VIME line's `parse_args()` accepts.

VIME parses its argv three times with `parse_known_args` (its vime/utils/arguments.py): a
pre-parser, the vLLM side (vLLM's engine and frontend flags re-prefixed `--vllm-`, VIME's own `--vllm-*` flags and
vllm-router's flags with the `--router-` prefix) and Megatron-LM's parser extended with VIME's
groups. A flag none of them knows is dropped without a word, so the harness needs the union as
data to reject a typo before a cluster job starts. This script writes that union.

Refreshing from your VIME checkout is one command (run it where VIME runs, in its image: the
Megatron-LM and vllm-router that VIME imports are found there):

    .venv/bin/python tools/build_vime_flag_table.py --line rl-align --vime-root /path/to/vime

It reads the checkout's `vime/utils/arguments.py`, `vime/backends/vllm_utils/arguments.py` and
`docker/patch/latest/megatron.patch` (the flags VIME's image adds to Megatron-LM), and records
the checkout's commit (`git rev-parse HEAD`) in the table's `sources`.

Where each part comes from (the commits are written into the table):
- VIME's groups and pre-parser: `add_argument`/`reset_arg` calls read with `ast` (module-level
  constants such as a tuple of choices are resolved), from the checkout or a copy (--vime-args).
- VIME's vLLM side: `ast` over `vime/backends/vllm_utils/arguments.py` for VIME's own flags and
  its list of engine arguments it sets itself (not re-exposed); the engine/frontend flags by
  building vLLM's own parser (the installed vllm) and applying VIME's renaming rule.
- vllm-router: `RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)`
  from --router-root, else the importable `vllm_router`.
- Megatron-LM: `add_megatron_arguments` from --megatron-root (e.g. `git archive <commit> megatron
  | tar -x` at the commit VIME's Dockerfile pins), else the importable `megatron.training`, plus
  the flags VIME's Megatron patch adds (--megatron-patch, or the checkout's patch).
A part that cannot be rebuilt here (no Megatron-LM tree, no vllm-router, no vLLM side file) is
kept from the current table with the source it was read from, and the table says so (`kept`).

Usage with copies of the files instead of a checkout (help texts are simply not read):
    .venv/bin/python tools/build_vime_flag_table.py --line rl-align --vime-args A.py \
        [--vllm-side-args B.py] [--megatron-patch P.patch] [--megatron-root DIR] [--router-root DIR] \
        [--vime-commit C --vllm-side-commit C --megatron-commit C] [--out FILE]
Build the other line's table, then this one's again, to get the differences noted both ways.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import vime_table_parts
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent

# Where each part was read (repository, path, commit), per VIME line.
RL_ALIGN_SOURCES = {
    "vime": {"repo": "RL-Align/vime", "path": "vime/utils/arguments.py", "commit": "0ea526a382ec6026b5c97b228655c09fe69397bb"},
    "vllm-side": {"repo": "RL-Align/vime", "path": "vime/backends/vllm_utils/arguments.py", "commit": "abf0226a8125e3fc0f3f7724138b091847b26369"},
    "megatron-validation": {
        "repo": "RL-Align/vime",
        "path": "vime/backends/megatron_utils/arguments.py",
        "commit": "82904ec54d62fdcb74056f4ba25c4886cc468727",
    },
    "megatron": {"repo": "NVIDIA/Megatron-LM", "path": "megatron/training/arguments.py", "commit": "1dcf0dafa884ad52ffb243625717a3471643e087"},
    "megatron-pin": {
        "repo": "vllm-project/vime",
        "path": "docker/Dockerfile",
        "commit": "071e2bcff1eaa1b06ff07c44a60252e8a17a4793",
        "note": "ARG MEGATRON_COMMIT=1dcf0da...; base image vllm/vllm-openai:v0.21.0. RL-Align/vime's own "
        "Dockerfile is not in the code index; the fork is assumed to keep upstream's pin.",
    },
}
UPSTREAM_SOURCES = {
    **RL_ALIGN_SOURCES,
    "vime": {
        **RL_ALIGN_SOURCES["vime"],
        "note": "RL-Align's file reused: upstream's vime/utils/arguments.py was not "
        "read, so VIME's groups, the router part and Megatron's are assumed equal",
    },
    "vllm-side": {"repo": "vllm-project/vime", "path": "vime/backends/vllm_utils/arguments.py", "commit": "0696c9bd8eccc21148a04821b353a8bf4f0c2b88"},
}
SOURCES_BY_LINE = {"rl-align": RL_ALIGN_SOURCES, "upstream": UPSTREAM_SOURCES}
OTHER_LINE = {"rl-align": "upstream", "upstream": "rl-align"}
PARSER_ORDER = ("pre", "vime", "vllm", "router", "megatron")


# ----------------------------------------------------------------------------- VIME's files (ast)


def _literal(node: ast.AST, constants: dict | None = None):
    """A keyword's value as data: literals as is, module-level constants by name (a tuple of
    choices), `int`/`json.loads` by name, arithmetic evaluated."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Name) and constants and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow, ast.Add)):
        left, right = _literal(node.left, constants), _literal(node.right, constants)
        return {ast.Mult: lambda: left * right, ast.Pow: lambda: left**right, ast.Add: lambda: left + right}[type(node.op)]()
    return ast.unparse(node)


def _module_constants(tree: ast.Module) -> dict:
    """NAME = <literal> assignments at module level (e.g. RLK_FAST_CHOICES = ("off", "auto", "strict"))."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return constants


def _own_nodes(func: ast.FunctionDef):
    """The nodes of a function's body, not descending into functions defined inside it."""
    stack = [n for n in func.body if not isinstance(n, ast.FunctionDef)]
    while stack:
        node = stack.pop(0)
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.FunctionDef))


def _calls(tree: ast.AST):
    """(enclosing function, call) for every add_argument(...) and reset_arg(parser, ...) call."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in _own_nodes(func):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "add_argument":
                yield func.name, node.args, node
            elif name == "reset_arg":
                yield func.name, node.args[1:], node


def vime_arguments(path: Path, parser_of) -> dict[str, dict]:
    """Flags defined in one of VIME's files; `parser_of(function name)` says which parser owns them."""
    tree = ast.parse(path.read_text())
    constants = _module_constants(tree)
    found: dict[str, dict] = {}
    for function, args, call in _calls(tree):
        names = [a.value for a in args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        kwargs = {k.arg: _literal(k.value, constants) for k in call.keywords if k.arg}
        is_reset = getattr(call.func, "id", "") == "reset_arg"
        entry = _entry_from_kwargs(kwargs)
        entry["group"] = function
        if is_reset:
            entry["reset"] = True
        for name in names:
            found.setdefault(name[2:], {**entry, "parser": parser_of(function)})
            if kwargs.get("action") == "argparse.BooleanOptionalAction":
                found.setdefault("no-" + name[2:], {**entry, "parser": parser_of(function), "note": f"negation of --{name[2:]}"})
    return found


def _entry_from_kwargs(kwargs: dict) -> dict:
    action = kwargs.get("action")
    switch = action in ("store_true", "store_false", "store_const", "argparse.BooleanOptionalAction", "count")
    kind = "switch" if switch else ("list" if kwargs.get("nargs") in ("+", "*") else "valued")
    typ = kwargs.get("type")
    typ = {"int": "int", "float": "float", "str": "str", "json.loads": "json"}.get(typ, typ)
    if not switch and typ is None:
        typ = "str"
    entry = {"kind": kind}
    if not switch:
        entry["type"] = typ if typ in ("int", "float", "str", "json") else "other"
    if kwargs.get("choices") is not None:
        entry["choices"] = list(kwargs["choices"])
    if switch:
        entry["default"] = action == "store_false" if "default" not in kwargs else kwargs["default"]
    else:
        entry["default"] = kwargs.get("default")
    if kwargs.get("required"):
        entry["required"] = True
    return entry


def vllm_skipped_arguments(path: Path) -> list[str]:
    """The engine arguments VIME sets itself and does not re-expose (its `skipped_args` list)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("skipped_args", "SKIPPED_DESTS") for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"{path}: no skipped_args list found")


# ------------------------------------------------------------------- parsers built by their owners


def _entry_from_action(action: argparse.Action) -> dict:
    switch = action.nargs == 0
    kind = "switch" if switch else ("list" if action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1 else "valued")
    entry = {"kind": kind}
    if not switch:
        typ = getattr(action.type, "__name__", None) if action.type is not None else "str"
        entry["type"] = {"int": "int", "float": "float", "str": "str", "loads": "json"}.get(typ, "other")
    if action.choices is not None:
        try:
            entry["choices"] = [_plain(c) for c in action.choices]
        except TypeError:
            pass
    entry["default"] = _plain(action.default)
    if action.required:
        entry["required"] = True
    return entry


def _plain(value):
    """A default or choice as YAML-safe data (enums and callables by name)."""
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value) if not callable(value) else getattr(value, "__name__", repr(value))


def _actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield action


def megatron_arguments(root: Path | None) -> dict[str, dict]:
    if root is not None:
        sys.path.insert(0, str(root))
    arguments = importlib.import_module("megatron.training.arguments")
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    found = {}
    for action in _actions(parser):
        for option in action.option_strings:
            if option.startswith("--"):
                found.setdefault(option[2:], {**_entry_from_action(action), "parser": "megatron"})
    return found


def vllm_engine_arguments(skipped: list[str], frontend: bool) -> tuple[dict[str, dict], str]:
    """vLLM's engine (and, on RL-Align, frontend) flags as VIME exposes them: `--vllm-<name>`,
    minus `skipped`."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(add_help=False)
    AsyncEngineArgs.add_cli_args(parser)
    if frontend:
        FrontendArgs.add_cli_args(parser)
    found = {}
    for action in _actions(parser):
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs:
            continue
        # VIME's rule: the canonical name is the explicit dest, else the first long flag's name.
        canonical = longs[0][2:].replace("-", "_")
        if canonical in skipped or action.dest in skipped:
            continue
        for option in action.option_strings:
            found.setdefault("vllm-" + option.lstrip("-"), {**_entry_from_action(action), "parser": "vllm"})
    import vllm

    return found, vllm.__version__


def router_arguments(root: Path | None) -> tuple[dict[str, dict], str]:
    if root is not None:
        sys.path.insert(0, str(root))
    router_args = importlib.import_module("vllm_router.router_args")
    parser = argparse.ArgumentParser(add_help=False)
    router_args.RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)
    # VIME's set_defaults on the vLLM side parser.
    parser.set_defaults(router_balance_abs_threshold=10, router_balance_rel_threshold=1.2)
    found = {}
    for action in _actions(parser):
        for option in action.option_strings:
            if option.startswith("--"):
                entry = {**_entry_from_action(action), "parser": "router"}
                entry["default"] = _plain(parser.get_default(action.dest))
                found.setdefault(option[2:], entry)
    version = importlib.import_module("vllm_router.version")
    return found, getattr(version, "__version__", "?")


# ------------------------------------------------------------------------------------- merge


def merge(parts: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """One entry per flag; `parsers` lists every parser that consumes it (each one parses the
    whole argv), the first of PARSER_ORDER gives the kind/type/default that wins."""
    table: dict[str, dict] = {}
    for part in PARSER_ORDER:
        for name, entry in sorted(parts.get(part, {}).items()):
            if name in table:
                table[name]["parsers"].append(part)
                continue
            entry = dict(entry)
            entry.pop("parser", None)
            group = entry.pop("group", None)
            reset = entry.pop("reset", False)
            table[name] = {"parsers": [part], **entry}
            if reset:
                table[name]["note"] = f"Megatron's flag; VIME's reset_arg in {group} sets this default"
    for name, entry in table.items():
        megatron = parts.get("megatron", {}).get(name)
        if entry.get("note", "").startswith("Megatron's flag") and megatron:
            # reset_arg keeps Megatron's action; only the default is VIME's.
            for key in ("kind", "type", "choices"):
                if key in megatron:
                    entry[key] = megatron[key]
    return dict(sorted(table.items()))


def note_other_line(table: dict[str, dict], line: str, other_path: Path) -> list[str]:
    """Mark each flag the other line's table (if built) lacks or defines differently; return the
    flags only the other line has. Build both tables, then the first again, for notes both ways."""
    if not other_path.is_file():
        return []
    other_line = OTHER_LINE[line]
    other = yaml.load(other_path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["flags"]
    for name, entry in table.items():
        theirs = other.get(name)
        if theirs is None:
            entry[other_line] = "absent"
            continue
        differs = []
        for key in ("kind", "type", "default"):
            if theirs.get(key) != entry.get(key):
                differs.append(f"{key} {theirs.get(key)!r}")
        if set(map(str, theirs.get("choices") or [])) != set(map(str, entry.get("choices") or [])):
            differs.append(f"choices {theirs.get('choices')!r}")
        if differs:
            entry[other_line] = "differs: " + ", ".join(differs)
    return sorted(set(other) - set(table))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    files = cli.add_mutually_exclusive_group(required=True)
    files.add_argument("--vime-root", type=Path, help="a VIME checkout: its argument files, Megatron patch and commit are read")
    files.add_argument("--vime-args", type=Path, help="copy of vime/utils/arguments.py")
    cli.add_argument("--vllm-side-args", type=Path, help="copy of vime/backends/vllm_utils/arguments.py (default: the checkout's)")
    cli.add_argument("--megatron-patch", type=Path, help="VIME's docker/patch/latest/megatron.patch (default: the checkout's)")
    cli.add_argument("--megatron-root", type=Path, help="Megatron-LM tree at the pinned commit (default: the importable megatron.training)")
    cli.add_argument("--router-root", type=Path, help="unpacked vllm-router wheel (default: the importable vllm_router)")
    cli.add_argument("--line", choices=sorted(SOURCES_BY_LINE), default="rl-align")
    # With copies of files, say which commits they are: they are written into the table.
    cli.add_argument("--vime-commit", help="commit of the VIME files (default: the checkout's HEAD)")
    cli.add_argument("--vllm-side-commit", help="commit of the file given with --vllm-side-args")
    cli.add_argument("--megatron-commit", help="commit of the Megatron-LM tree given with --megatron-root")
    cli.add_argument("--megatron-patch-source", help="where the --megatron-patch copy was read: REPO@COMMIT (default: the checkout)")
    cli.add_argument("--out", type=Path, default=None, help="default: knobs/vime/flags-<line>.yaml")
    return cli.parse_args(argv)


def _inputs(args: argparse.Namespace) -> dict:
    """The files to read and the commits to record: from a checkout, or from the copies given."""
    if args.vime_root is not None:
        files = vime_table_parts.checkout_files(args.vime_root)
        commit = args.vime_commit or vime_table_parts.checkout_commit(args.vime_root) or "unknown (not a git checkout)"
        repo = f"checkout {args.vime_root}"
        return {
            "vime": files["vime"],
            "vllm-side": args.vllm_side_args or files["vllm-side"],
            "megatron-patch": args.megatron_patch or files["megatron-patch"],
            "commit": commit,
            "repo": repo,
        }
    return {"vime": args.vime_args, "vllm-side": args.vllm_side_args, "megatron-patch": args.megatron_patch, "commit": args.vime_commit, "repo": None}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    line = args.line
    out = args.out or REPO_ROOT / "knobs" / "vime" / f"flags-{line}.yaml"
    current = yaml.load(out.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if out.is_file() else {}
    inputs = _inputs(args)
    sources = {name: dict(source) for name, source in (current.get("sources") or SOURCES_BY_LINE[line]).items()}
    kept: list[str] = []

    def record(name: str, **fields) -> None:
        sources[name] = {k: v for k, v in fields.items() if v is not None}

    def keep(part: str, why: str) -> dict[str, dict]:
        if not current:
            raise SystemExit(f"{out}: no current table to keep the {part} part from ({why}); give its input")
        kept.append(part)
        return vime_table_parts.kept_part(current, part)

    parts: dict[str, dict[str, dict]] = {}
    vime = vime_arguments(inputs["vime"], lambda fn: "pre" if fn == "_pre_parse_mode" else "vime")
    parts["pre"] = {k: v for k, v in vime.items() if v["parser"] == "pre"}
    parts["vime"] = {k: v for k, v in vime.items() if v["parser"] == "vime"}
    vime_source = sources.get("vime", {})
    record(
        "vime",
        repo=inputs["repo"] or vime_source.get("repo"),
        path=vime_table_parts.VIME_ARGS,
        commit=inputs["commit"] or vime_source.get("commit"),
        note=None if inputs["repo"] or inputs["commit"] else "the commit of the --vime-args copy was not given",
    )

    if inputs["vllm-side"] is not None:
        vllm_side = vime_arguments(inputs["vllm-side"], lambda fn: "vllm")
        vllm_side.pop("rollout-num-gpus-per-engine", None)  # VIME's own flag, read again to size engine TP
        # RL-Align re-exposes vLLM's frontend flags too (FrontendArgs); upstream only the engine's.
        engine, vllm_version = vllm_engine_arguments(vllm_skipped_arguments(inputs["vllm-side"]), frontend=line == "rl-align")
        parts["vllm"] = {**vllm_side, **engine}
        side_commit = args.vllm_side_commit or inputs["commit"]
        record("vllm-side", repo=inputs["repo"] or sources.get("vllm-side", {}).get("repo"), path=vime_table_parts.VLLM_SIDE_ARGS, commit=side_commit)
        record(
            "vllm-engine",
            package="vllm",
            version=vllm_version,
            note="the installed vLLM's AsyncEngineArgs + FrontendArgs; VIME's image pins its own vLLM, "
            "so a flag added or removed between the two versions is wrong here",
        )
    else:
        parts["vllm"] = keep("vllm", "no vLLM side file given")

    if args.router_root is not None or _importable("vllm_router"):
        parts["router"], router_version = router_arguments(args.router_root)
        record("router", package="vllm-router", version=router_version, note=f"RouterArgs from {args.router_root or 'the importable vllm_router'}")
    else:
        parts["router"] = keep("router", "no vllm-router here")

    if args.megatron_root is not None or _importable("megatron.training"):
        parts["megatron"] = megatron_arguments(args.megatron_root)
        if args.megatron_commit:
            sources["megatron"] = {**sources.get("megatron", {}), "commit": args.megatron_commit, "note": "given with --megatron-commit"}
    else:
        parts["megatron"] = {k: v for k, v in keep("megatron", "no Megatron-LM tree here").items() if "Megatron patch" not in v.get("note", "")}
    if inputs["megatron-patch"] is not None:
        patched, warnings = vime_table_parts.megatron_patch_arguments(inputs["megatron-patch"], _entry_from_kwargs, _literal)
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for name, entry in patched.items():
            parts["megatron"].setdefault(name, entry)
        repo, _, commit = (args.megatron_patch_source or f"{inputs['repo'] or 'unknown'}@{inputs['commit'] or 'unknown'}").rpartition("@")
        record(
            "megatron-patch",
            repo=repo,
            path=vime_table_parts.MEGATRON_PATCH,
            commit=commit,
            note=f"flags VIME's image adds to Megatron-LM: {', '.join(sorted(patched)) or 'none'}",
        )

    for part in kept:
        sources.setdefault(part if part != "vllm" else "vllm-side", {})
    table = merge(parts)
    only_other = note_other_line(table, line, out.parent / f"flags-{OTHER_LINE[line]}.yaml")
    document = {
        "line": line,
        "generated-by": "tools/build_vime_flag_table.py",
        "vime-commit": sources["vime"].get("commit", "unknown"),
        "sources": sources,
        "kept": sorted(kept),
        "counts": {part: sum(1 for e in table.values() if e["parsers"][0] == part) for part in PARSER_ORDER},
        f"only-{OTHER_LINE[line]}": only_other,
        "flags": table,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# Generated by tools/build_vime_flag_table.py - do not edit by hand; re-run the tool.\n"
        "# Every flag VIME's parse_args() consumes on this line; `parsers` lists the parsers that\n"
        "# read it (pre: VIME's pre-parser; vime: VIME's groups on Megatron's parser; vllm: the vLLM\n"
        "# side with --vllm- names; router: vllm-router with --router- names; megatron: Megatron-LM).\n"
        "# `kept`: parts not rebuilt by the last run (no input for them there), as read at their source.\n"
    )
    flags = document.pop("flags")
    # One line per flag: the table is long, and a diff after re-running the tool should show
    # exactly the flags that changed.
    lines = [f"  {name}: {yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=10**6).strip()}" for name, entry in flags.items()]
    text = header + yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=160) + "flags:\n" + "\n".join(lines) + "\n"
    out.write_text(text)
    print(
        f"{out}: {len(table)} flags from VIME {document['vime-commit']} ({', '.join(f'{k} {v}' for k, v in document['counts'].items())}); kept: {', '.join(kept) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
