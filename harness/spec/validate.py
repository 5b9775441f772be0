"""Reject, before anything is launched, what VIME or Megatron would reject at start-up.

Each rule (harness/spec/rules.py: every backend; harness/spec/vime_rules.py: a real VIME cluster)
mirrors a check VIME or Megatron makes (its message names where). A rule blames one flag; the
error line names the knob file and key that set that flag (from the spec's provenance) and the
rule's name, so each problem is one line a person can act on.
"""

from __future__ import annotations

# Imported for their registrations: the every-backend rules, then the cluster rules (problems are
# listed in that order).
from harness.spec import backends, rules, vime_rules  # noqa: F401
from harness.spec.errors import SpecError
from harness.spec.load import Knobs, _relative
from harness.spec.resolve import RunSpec
from harness.spec.rules import RULES, Finding


def where(knobs: Knobs, spec: RunSpec, flag: str | None) -> str:
    """`file: key` of the knob that set `flag` in this spec (the last layer that set it wins)."""
    if flag is None or flag not in spec.provenance:
        return f"{_relative(knobs.root)} ({spec.stage}/{spec.rung}/{spec.mode})" + (f": --{flag} (not set)" if flag else "")
    origin = spec.provenance[flag]
    kind, _, name = origin.partition(":")
    section = backends.backend(spec.backend).knob_section

    def key_in(layer, prefix: str) -> str:
        return f"{prefix}{section if flag in getattr(layer, section) else 'flags'}.{flag}"

    root = knobs.root
    if kind == "base":
        return f"{_relative(root / 'base.yaml')}: {key_in(knobs.base, '')}"
    if kind == "mode":
        return f"{_relative(root / 'base.yaml')}: {key_in(knobs.base.modes[name], f'modes.{name}.')}"
    if kind == "stage":
        return f"{_relative(root / 'stages.yaml')}: {key_in(knobs.stages[name], f'stages.{name}.')}"
    if kind == "rung":
        return f"{_relative(root / 'ladder' / f'{name}.yaml')}: {key_in(knobs.rungs[name].changes, 'changes.')}"
    if kind == "model":
        return f"{_relative(root / 'models' / f'{name}.yaml')}: flags.{flag}"
    if kind == "hardware":
        return f"{_relative(root / 'stages.yaml')}: hardware.{name}.gpus-per-node (rendered as --{flag})"
    if kind == "site":
        return _site_key(origin.removeprefix("site:"), flag)
    return f"{origin} {flag}"


def _site_key(origin: str, flag: str) -> str:
    """`site.yaml: stages.p0.tensor-parallel` for a flag a site file's layer set."""
    from harness.spec.site import PARALLELISM_FLAGS

    file, _, section = origin.partition(" ")
    section = section.split(" (")[0]
    if section.startswith("stages."):
        site_keys = {f: k.replace("_", "-") for k, f in PARALLELISM_FLAGS.items()}
        site_keys.update({"num-gpus-per-node": "gpus-per-node", "actor-num-gpus-per-node": "gpus-per-node", "actor-num-nodes": "actor-nodes"})
        site_keys["rollout-num-gpus"] = "rollout-gpus"
        return f"{file}: {section}.{site_keys.get(flag, 'flags.' + flag)}"
    if section.startswith("("):  # a candidate file of its own
        return f"{file}: flags.{flag}"
    if section:
        return f"{file}: {section}.{flag}" if section in ("flags", "wandb") else f"{file}: candidate.flags.{flag}"
    return f"{file}: {flag}"


def problems_of(spec: RunSpec, knobs: Knobs) -> list[str]:
    """One line per broken rule: `file: key: message [rule NAME; stage/rung/mode on backend]`."""
    context = f"{spec.stage}/{spec.rung}/{spec.mode} on {spec.backend}"
    problems = []
    for registered in RULES:
        if spec.backend not in registered.backends:
            continue
        try:
            found = registered.check(spec.flags, spec, knobs)
        except SpecError as err:
            found = Finding(None, "; ".join(err.problems))
        for finding in found if isinstance(found, list) else [found]:
            if not finding:
                continue
            if isinstance(finding, str):
                finding = Finding(None, finding)
            problems.append(f"{where(knobs, spec, finding.flag)}: {finding.message} [rule {registered.name}; {context}]")
    return problems


def validate(spec: RunSpec, knobs: Knobs) -> RunSpec:
    """Raise SpecError listing every rule the resolved spec breaks; return the spec otherwise."""
    problems = problems_of(spec, knobs)
    if problems:
        raise SpecError(problems)
    return spec
