"""What a run directory says the run was: its resolved spec, typed, read once.

`recorded_spec(mapping, argv)` is the one reader. A launched run's spec.yaml is a resolved spec
(harness.spec.resolve.RunSpec.to_dict): stage, rung, mode, backend, spec hash and flags. An
ingested run's spec.yaml holds only the labels it was ingested with (and no flags); its flags, when
it has an argv, come from the argv through the same parser the renderer's output is read with
(harness.spec.render.parse_argv). Every layer above reads `run.spec.flags` / `run.spec.rung` and
never the YAML mapping.
"""

from __future__ import annotations

from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.spec.flag_read import flag_value, int_flag
from harness.spec.schema import FlagValue

SPEC_FILE = "spec.yaml"


class RecordedSpec(BaseModel):
    """A run's spec as its directory records it. Fields the record does not carry are None."""

    model_config = ConfigDict(extra="ignore")

    # Whether the directory has a readable spec.yaml, and where the flags came from: spec.yaml,
    # the run's argv, or neither (then flags is empty).
    recorded: bool = False
    flags_from: Literal["spec.yaml", "argv", "none"] = "none"
    run_id: str | None = None
    stage: str | None = None
    rung: str | None = None
    mode: str | None = None
    backend: str | None = None
    spec_hash: str | None = None
    code_version: str | None = None
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    overrides: dict[str, FlagValue] = Field(default_factory=dict)
    provenance: dict[str, str] = Field(default_factory=dict)

    def flag(self, name: str, default=None):
        """A flag's value, `default` when the run does not set it (or sets it to null)."""
        return flag_value(self.flags, name, default)

    @property
    def seed(self) -> int | None:
        return int_flag(self.flags, "seed")

    def as_yaml(self) -> str:
        """The record as spec.yaml spells it (the report attaches this)."""
        data = self.model_dump(exclude={"recorded", "flags_from"}, exclude_none=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _argv_flags(argv: list[str] | None) -> tuple[dict[str, FlagValue], str | None]:
    from harness.spec.render import parse_argv

    if not argv:
        return {}, None
    try:
        return parse_argv([str(token) for token in argv], skip_strays=True), None
    except ValueError as err:  # a malformed argv reads as no flags, said once
        return {}, f"argv.json: not a --flag [value] list ({err}); the run's flags are unknown"


def recorded_spec(mapping: dict | None, argv: list[str] | None) -> tuple[RecordedSpec, list[str]]:
    """The typed spec of a run from its spec.yaml mapping (or None) and its argv (or None), and one
    line per problem (file, key, expected). Flags come from spec.yaml when it has any, else the argv."""
    problems: list[str] = []
    spec = RecordedSpec()
    if mapping is not None:
        try:
            spec = RecordedSpec.model_validate(mapping)
        except ValidationError as err:
            for error in err.errors():
                key = ".".join(str(part) for part in error["loc"]) or "(top level)"
                problems.append(f"{SPEC_FILE}: key {key!r}: {error['msg']} (found {error.get('input')!r})")
            # Keep the labels that are fine; a bad section reads as absent.
            good = {
                k: v for k, v in mapping.items() if k in RecordedSpec.model_fields and not any(e["loc"] and e["loc"][0] == k for e in err.errors())
            }
            spec = RecordedSpec.model_validate(good)
        spec = spec.model_copy(update={"recorded": True})
    if spec.flags:
        return spec.model_copy(update={"flags_from": "spec.yaml"}), problems
    flags, problem = _argv_flags(argv)
    if problem:
        problems.append(problem)
    return spec.model_copy(update={"flags": flags, "flags_from": "argv" if flags else "none"}), problems
