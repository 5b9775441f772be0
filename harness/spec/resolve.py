"""Merge the layers into one resolved spec and give it a stable id.

Order: base <- model <- stage <- hardware <- mode <- rung chain (root first) <- site file <-
session --set <- the caller's overrides; then the site's real paths fill the placeholders
(harness/spec/site.py: a flag a rung sets is never replaced by the site or --set silently); `model` (knobs/models/) and `hardware` (stages.yaml: GPUs per node) only where they
are rendered. Within a layer, the flags for every backend apply first, then the backend's own section. `null` deletes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from harness.spec import backends
from harness.spec.cluster import equivalence_note, site_stage_hardware, skip_reason
from harness.spec.code_version import embedded_code_version
from harness.spec.errors import SpecError
from harness.spec.load import Knobs
from harness.spec.machine import cpu_isa
from harness.spec.models import model_flags, rename_placeholders
from harness.spec.run_identity import computed_flags
from harness.spec.schema import MODES, FlagValue, check_flag_names
from harness.spec.site import candidate_layer, fill_paths, rung_owned_problems, settings_layers
from harness.spec.values import value_problem


@dataclass(frozen=True)
class RunSpec:
    """One run, fully resolved: what to launch and where each flag came from."""

    stage: str
    rung: str
    mode: str
    backend: str
    flags: dict[str, FlagValue]
    provenance: dict[str, str] = field(compare=False)
    overrides: dict[str, FlagValue] = field(default_factory=dict)
    # What the run stands for when it is not literally the rung (a rung's nearest VIME equivalent).
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def spec_hash(self) -> str:
        # Only what changes the run itself: the backend that executes it and the flags that decide
        # what it computes (not where its metrics go: harness.spec.run_identity). Stage and rung
        # are names; two stages with the same embedded profile share one run.
        payload = {"backend": self.backend, "flags": computed_flags(self.flags)}
        if backends.backend(self.backend).trainer_in_repo:
            payload["code"] = embedded_code_version()
            # The CPU's numerics: a run made on the other x86 kind, or under the ISA switches or the
            # AVX2-only emulation, computed other numbers and is not this machine's run to reuse.
            payload["cpu"] = cpu_isa()
        payload = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def run_id(self) -> str:
        # Named by what it runs, not by who asked: a rung with a replay override and the candidate
        # rung that sets the same flag are one run, and so are P1 and P3 with equal profiles.
        mode = "colocate" if self.flags.get("colocate") else "split"
        return f"{self.backend}-{mode}-{self.spec_hash}"

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "stage": self.stage,
            "rung": self.rung,
            "mode": self.mode,
            "backend": self.backend,
            "spec_hash": self.spec_hash,
            "flags": dict(self.flags),
            "code_version": embedded_code_version() if backends.backend(self.backend).trainer_in_repo else None,
            "overrides": dict(self.overrides),
            "provenance": dict(self.provenance),
            "notes": list(self.notes),
        }


def _apply(flags: dict, provenance: dict, layer: dict[str, FlagValue], origin: str) -> None:
    for name, value in layer.items():
        if value is None:
            flags.pop(name, None)
            provenance.pop(name, None)
        else:
            flags[name] = value
            provenance[name] = origin


def resolve(knobs: Knobs, stage: str, rung: str, mode: str, backend: str = "embedded", overrides: dict[str, FlagValue] | None = None) -> RunSpec:
    problems = []
    if stage not in knobs.stages:
        problems.append(f"--stage: expected one of {', '.join(knobs.stages)}, got {stage!r}")
    if rung not in knobs.rungs:
        problems.append(f"--rung: expected one of {', '.join(sorted(knobs.rungs))}, got {rung!r}")
    if mode not in MODES:
        problems.append(f"--mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if backend not in backends.names():
        problems.append(f"--backend: expected one of {', '.join(backends.names())}, got {backend!r}")
    if problems:
        raise SpecError(problems)
    stage_cfg = knobs.stages[stage]
    if mode not in stage_cfg.modes:
        raise SpecError(f"--mode {mode}: stage {stage} ({stage_cfg.title}) runs {' and '.join(stage_cfg.modes)} only (stages.yaml)")
    rung_cfg = knobs.rungs[rung]
    if stage not in rung_cfg.stages:
        raise SpecError(f"--rung {rung}: runs at stages {', '.join(rung_cfg.stages)}, not {stage} (ladder/{rung}.yaml: stages)")
    skipped = skip_reason(knobs, rung_cfg, backend)  # its `backends`, or an on-vime skip
    if skipped:
        raise SpecError(skipped)

    flags: dict[str, FlagValue] = {}
    provenance: dict[str, str] = {}
    # base <- model <- stage <- hardware <- mode <- rung chain <- --set. The model's architecture
    # flags sit right above base so that a stage or rung could still override one of them.
    model_origin, model_layer = model_flags(knobs, backend)
    for section in knobs.base.for_backend(backend):
        _apply(flags, provenance, section, "base")
    _apply(flags, provenance, model_layer, model_origin)
    for section in stage_cfg.for_backend(backend):
        _apply(flags, provenance, section, f"stage:{stage}")
    if backends.backend(backend).on_cluster and knobs.hardware:
        hardware, node = site_stage_hardware(knobs, stage)
        _apply(flags, provenance, {"num-gpus-per-node": node.gpus_per_node}, f"hardware:{hardware}")
    layers = [(f"mode:{mode}", knobs.base.modes[mode])]
    layers += [(f"rung:{r.id}", r.changes) for r in knobs.chain(rung)]
    for origin, layer in layers:
        for section in layer.for_backend(backend):
            _apply(flags, provenance, section, origin)
    # The site's and the session's --set layers: a flag a rung sets is refused unless the site
    # lists it under overrides-rungs (harness/spec/site.py rule 2).
    owned = []
    for origin, layer in settings_layers(knobs, stage, backend, rung):
        owned += rung_owned_problems(knobs, rung, origin, layer, provenance)
        _apply(flags, provenance, layer, origin)
    if owned:
        raise SpecError(owned)
    overrides = dict(overrides or {})
    try:
        check_flag_names(overrides)
    except ValueError as err:
        raise SpecError(f"--set: {err}") from None
    bad_values = [f"--set {name}={value}: {problem}" for name, value in overrides.items() if (problem := value_problem(name, value))]
    if bad_values:
        raise SpecError(bad_values)
    _apply(flags, provenance, overrides, "--set")
    rename_placeholders(knobs, flags, provenance, backend)
    fill_paths(knobs, flags, provenance)
    if knobs.sets:  # recorded with the run as --set was before it became a session setting
        overrides = {**knobs.sets, **overrides}
    candidate = candidate_layer(knobs, rung, backend)
    note = f"candidate operator path: {candidate[0].removeprefix('site:')}" if candidate else equivalence_note(knobs, rung_cfg, backend)
    return RunSpec(stage, rung, mode, backend, flags, provenance, overrides, notes=(note,) if note else ())
