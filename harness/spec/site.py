"""A site file: one cluster's paths, Ray address, node shapes, forwarded environment and W&B project,
layered over knobs/ (knobs < site < --set), and the three rules that keep that layering honest.

1. A placeholder path in knobs/ (`/path/to/...`) is filled from the site's `paths:` map, keyed by
   the placeholder itself: the FP8 checkpoint goes where a rung asks for the FP8 checkpoint and the
   BF16 one where a rung asks for BF16. A session-wide `--set hf-checkpoint=...` cannot do that
   (it would make near-aligned's BF16 rollout FP8), so it is refused (rule 2).
2. A flag a rung sets (its own `changes:` or an ancestor's) is never replaced by the site or by
   --set without a word: that is one error line naming the rung, unless the site lists the flag
   under `overrides-rungs:` (an explicit, recorded choice).
3. A placeholder that reaches a launch on the vime backend is one error line naming the flag, the
   knob file that set it and the site file to set it in (`launch_problems`). The embedded backend
   never renders those paths.
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from harness.spec import backends
from harness.spec.errors import SpecError
from harness.spec.schema import FlagValue, Strict, check_flag_names
from harness.spec.values import PLACEHOLDER_PREFIX, flag_value_problems, value_problem

EXAMPLE_SITE = "knobs/sites/example.yaml"


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PLACEHOLDER_PREFIX)


# A stage's parallelism keys -> the VIME (Megatron / VIME) flag each renders as.
PARALLELISM_FLAGS = {
    "tensor_parallel": "tensor-model-parallel-size",
    "pipeline_parallel": "pipeline-model-parallel-size",
    "context_parallel": "context-parallel-size",
    "expert_parallel": "expert-model-parallel-size",
    "expert_tensor_parallel": "expert-tensor-parallel-size",
    "rollout_gpus_per_engine": "rollout-num-gpus-per-engine",
}


class SiteStage(Strict):
    """One stage's shape on this cluster, rendered as VIME's placement and parallelism flags."""

    # The node type (a name under `hardware:` in knobs/stages.yaml) when this cluster's differs from
    # the stage's: its GPUs per node and GPU memory are what the capacity check uses.
    hardware: str | None = None
    gpus_per_node: int | None = Field(None, alias="gpus-per-node", ge=1)  # --num-gpus-per-node and --actor-num-gpus-per-node
    actor_nodes: int | None = Field(None, alias="actor-nodes", ge=1)  # --actor-num-nodes
    rollout_gpus: int | None = Field(None, alias="rollout-gpus", ge=1)  # --rollout-num-gpus (non-colocate: the vLLM side)
    # Megatron's parallelism for this stage on this cluster (each renders as its flag, PARALLELISM_FLAGS).
    tensor_parallel: int | None = Field(None, alias="tensor-parallel", ge=1)
    pipeline_parallel: int | None = Field(None, alias="pipeline-parallel", ge=1)
    context_parallel: int | None = Field(None, alias="context-parallel", ge=1)
    expert_parallel: int | None = Field(None, alias="expert-parallel", ge=1)
    expert_tensor_parallel: int | None = Field(None, alias="expert-tensor-parallel", ge=1)
    # GPUs of one vLLM engine (its tensor parallelism).
    rollout_gpus_per_engine: int | None = Field(None, alias="rollout-gpus-per-engine", ge=1)
    # Any other VIME flag for this stage only (e.g. max-tokens-per-gpu for a smaller node).
    flags: dict[str, FlagValue] = Field(default_factory=dict)

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return check_flag_names(flags)

    def flags_for_vime(self) -> dict[str, FlagValue]:
        out: dict[str, FlagValue] = {}
        if self.gpus_per_node is not None:
            out["num-gpus-per-node"] = self.gpus_per_node
            out["actor-num-gpus-per-node"] = self.gpus_per_node
        if self.actor_nodes is not None:
            out["actor-num-nodes"] = self.actor_nodes
        if self.rollout_gpus is not None:
            out["rollout-num-gpus"] = self.rollout_gpus
        for field, flag in PARALLELISM_FLAGS.items():
            if getattr(self, field) is not None:
                out[flag] = getattr(self, field)
        if self.tensor_parallel == 1:
            out["sequence-parallel"] = None  # Megatron turns it off without tensor parallelism; say so in the argv
        return {**out, **self.flags}


class SiteCandidate(Strict):
    """The candidate operator path of the P3 A/B on this cluster: VIME flags put on the candidate
    side only (knobs/ab.yaml pair.candidate), never on the baseline."""

    # What the candidate is, in words (the record shows it beside the flags).
    name: str = Field(min_length=1)
    # The flags that switch the candidate path on, e.g. enable-rl-kernel + rl-kernel-ops linear_logp.
    flags: dict[str, FlagValue] = Field(min_length=1)
    # Where this came from: the site file, or the candidate file it names.
    source: str = Field("", exclude=True)

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return check_flag_names(flags)


class SiteEnv(Strict):
    """What a launched job's environment holds besides what Ray gives it."""

    # Names (fnmatch patterns, e.g. WANDB_*, HF_*) copied from the launching shell's environment.
    forward: list[str] = Field(default_factory=list)
    # Values set here, for every job.
    set: dict[str, str] = Field(default_factory=dict)

    def for_job(self, environ: dict[str, str]) -> dict[str, str]:
        out = {name: value for name, value in environ.items() if any(fnmatch.fnmatchcase(name, p) for p in self.forward)}
        return {**out, **self.set}


class SiteWandb(Strict):
    """Where VIME's W&B logging goes (`--use-wandb`); the entity reaches wandb as WANDB_ENTITY."""

    project: str = Field(min_length=1)
    entity: str | None = None
    group: str | None = None
    mode: Literal["online", "offline"] = "online"

    def flags(self) -> dict[str, FlagValue]:
        out: dict[str, FlagValue] = {"use-wandb": True, "wandb-project": self.project, "wandb-mode": self.mode}
        if self.group:
            out["wandb-group"] = self.group
        return out

    def env(self) -> dict[str, str]:
        out = {"WANDB_PROJECT": self.project, "WANDB_MODE": self.mode}
        if self.entity:
            out["WANDB_ENTITY"] = self.entity
        return out


class Site(Strict):
    """A cluster, as a site file describes it. Every key is optional; unknown keys are errors."""

    # Placeholder path in knobs/ -> the real path on the cluster (checkpoints, data, reference load).
    paths: dict[str, str] = Field(default_factory=dict)
    # The VIME checkout on the cluster's nodes (it holds train.py).
    vime_root: str | None = Field(None, alias="vime-root")
    # The Ray job server runs are submitted to (http://HEAD:8265).
    ray_address: str | None = Field(None, alias="ray-address")
    # Where a job's entrypoint starts on the cluster (default: vime-root).
    working_dir: str | None = Field(None, alias="working-dir")
    # The shared runs directory: the same path on this machine and on every node (a shared file
    # system). Run directories, with the jobs' dumps, are written there; the default --runs-dir.
    runs_dir: str | None = Field(None, alias="runs-dir")
    # Per stage (p0..p3): node type, GPUs per node, node counts and parallelism on this cluster.
    stages: dict[str, SiteStage] = Field(default_factory=dict)
    # The model this cluster runs (knobs/models/<id>.yaml), over base.yaml's `model.vime`.
    model: str | None = None
    # The container image the nodes run VIME in (recorded with every run; --image replaces it).
    image: str | None = None
    # The P3 candidate's flags: inline, or the path of a candidate file (relative to this file).
    candidate: SiteCandidate | str | None = None
    env: SiteEnv = Field(default_factory=SiteEnv)
    wandb: SiteWandb | None = None
    # VIME flags for every run on this site's cluster (layered over knobs/, under --set; not on the
    # embedded backend, whose trainer takes only the flags it implements).
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    # Flags that a rung sets which this site deliberately replaces (rule 2).
    overrides_rungs: list[str] = Field(default_factory=list, alias="overrides-rungs")
    # Filled by load_site: the file this came from, for error lines and provenance.
    source: str = Field("", exclude=True)

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return check_flag_names(flags)

    @field_validator("paths")
    @classmethod
    def _placeholders_as_keys(cls, paths: dict[str, str]) -> dict[str, str]:
        for key, value in paths.items():
            if not is_placeholder(key):
                raise ValueError(f"keys that are knobs/ placeholders (starting {PLACEHOLDER_PREFIX}), got {key!r}")
            if is_placeholder(value):
                raise ValueError(f"a real path for {key!r}, got another placeholder {value!r}")
        return paths

    def job_env(self, environ: dict[str, str]) -> dict[str, str]:
        """The variables a launched job receives from this site (forwarded, set, W&B)."""
        return {**self.env.for_job(environ), **(self.wandb.env() if self.wandb else {})}


def _allowed_keys(model: type[Strict], loc: tuple) -> list[str]:
    """The keys the site file allows at the mapping that holds `loc`'s last part."""
    current: type = model
    for part in loc[:-1]:
        field = current.model_fields.get(_field_name(current, part)) if isinstance(part, str) else None
        if field is None:
            break
        annotation = field.annotation
        args = [a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, Strict)]
        if isinstance(annotation, type) and issubclass(annotation, Strict):
            current = annotation
        elif args:
            current = args[-1]  # dict[str, SiteStage] or SiteWandb | None
    return [f.alias or name for name, f in current.model_fields.items() if name != "source"]


def _field_name(model: type[Strict], key: str) -> str:
    for name, field in model.model_fields.items():
        if field.alias == key or name == key:
            return name
    return key


def load_site(path: str | Path) -> Site:
    """Read and check a site file; every problem is one line naming the file and the key."""
    from harness.spec.load import _describe, _relative, read_yaml

    path = Path(path)
    name = _relative(path)
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"{name}: expected a mapping of site keys ({', '.join(_allowed_keys(Site, ('x',)))}), got {type(data).__name__}")
    if "source" in data:  # set by this loader, never by the file
        raise SpecError(f"{name}: source: unknown site key; allowed here: {', '.join(_allowed_keys(Site, ('source',)))}")
    try:
        site = Site.model_validate(data)
    except ValidationError as err:
        problems = []
        for error in err.errors():
            key = ".".join(str(part) for part in error["loc"])
            if error["type"] == "extra_forbidden":
                problems.append(f"{name}: {key}: unknown site key; allowed here: {', '.join(_allowed_keys(Site, error['loc']))}")
            else:
                problems.append(_describe(name, error, data))
        raise SpecError(problems) from None
    problems = flag_value_problems(name, "flags.", site.flags)
    for stage_name, stage in site.stages.items():
        problems += flag_value_problems(name, f"stages.{stage_name}.flags.", stage.flags)
    candidate = site.candidate
    if isinstance(candidate, str):
        candidate = load_candidate(path.parent / candidate, f"{name}: candidate")
    elif candidate is not None:
        problems += flag_value_problems(name, "candidate.flags.", candidate.flags)
        candidate = candidate.model_copy(update={"source": f"{name} candidate"})
    if problems:
        raise SpecError(problems)
    return site.model_copy(update={"source": name, "candidate": candidate})


def load_candidate(path: Path, named_by: str = "") -> SiteCandidate:
    """A candidate file (`name:`, `flags:`): the P3 candidate's VIME flags, read and checked."""
    from harness.spec.load import _describe, _relative, read_yaml

    path = Path(path)
    name = _relative(path)
    if not path.is_file():
        raise SpecError(f"{named_by}: expected a candidate file (name:, flags:), got {str(path)!r}, which does not exist")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{name}: expected a mapping with name: and flags:, got {type(data).__name__}")
    try:
        candidate = SiteCandidate.model_validate(data)
    except ValidationError as err:
        raise SpecError(
            [
                f"{name}: {'.'.join(map(str, e['loc']))}: unknown key; allowed here: name, flags"
                if e["type"] == "extra_forbidden"
                else _describe(name, e, data)
                for e in err.errors()
            ]
        ) from None
    problems = flag_value_problems(name, "flags.", candidate.flags)
    if problems:
        raise SpecError(problems)
    return candidate.model_copy(update={"source": name})


def with_settings(knobs, site: Site | None, sets: dict[str, FlagValue] | None = None):
    """The knobs with a site and session-wide --set values layered on: every resolve() of the result
    applies them (knobs < site < --set < a caller's own overrides)."""
    problems = []
    if site is not None:
        for stage, shape in site.stages.items():
            if stage not in knobs.stages:
                problems.append(f"{site.source}: stages.{stage}: expected a stage of knobs/stages.yaml ({', '.join(knobs.stages)}), got {stage!r}")
            if shape.hardware is not None and shape.hardware not in knobs.hardware:
                problems.append(
                    f"{site.source}: stages.{stage}.hardware: expected a node type of knobs/stages.yaml hardware: "
                    f"({', '.join(knobs.hardware) or 'none'}), got {shape.hardware!r}"
                )
        if site.model is not None:
            from harness.spec.models import load_model

            try:
                load_model(knobs.root, site.model)
            except SpecError as err:
                problems += [f"{site.source}: model: {problem.split(': model: ', 1)[-1]}" for problem in err.problems]
    sets = dict(sets or {})
    try:
        check_flag_names(sets)
    except ValueError as err:
        problems.append(f"--set: {err}")
    problems += [f"--set {name}={value}: {problem}" for name, value in sets.items() if (problem := value_problem(name, value))]
    if problems:
        raise SpecError(problems)
    return replace(knobs, site=site, sets=sets)


def settings_layers(knobs, stage: str, backend: str, rung: str | None = None) -> list[tuple[str, dict[str, FlagValue]]]:
    """(origin, flags) of the site's and --set's layers for one stage, backend and rung, lowest first.
    The site's candidate flags apply to the A/B's candidate rung only (candidate_layer)."""
    layers: list[tuple[str, dict[str, FlagValue]]] = []
    site: Site | None = knobs.site
    if site is not None:
        if backends.backend(backend).on_cluster and stage in site.stages:
            layers.append((f"site:{site.source} stages.{stage}", site.stages[stage].flags_for_vime()))
        if site.wandb is not None:  # the embedded trainer logs through the same flags (harness/embedded/tracking.py)
            layers.append((f"site:{site.source} wandb", site.wandb.flags()))
        if backends.backend(backend).on_cluster and site.flags:  # VIME flags: the miniature's own table lacks most of them
            layers.append((f"site:{site.source} flags", dict(site.flags)))
        candidate = candidate_layer(knobs, rung, backend)
        if candidate:
            layers.append(candidate)
    if knobs.sets:
        layers.append(("--set", dict(knobs.sets)))
    return layers


def candidate_layer(knobs, rung: str | None, backend: str) -> tuple[str, dict[str, FlagValue]] | None:
    """The site's candidate flags when `rung` is the A/B pair's candidate on a cluster backend."""
    site: Site | None = knobs.site
    if site is None or not isinstance(site.candidate, SiteCandidate) or not backends.backend(backend).on_cluster:
        return None
    if rung != knobs.ab.pair.candidate:
        return None
    return (f"site:{site.candidate.source} (candidate {site.candidate.name})", dict(site.candidate.flags))


def rung_owned_problems(knobs, rung: str, origin: str, layer: dict, provenance: dict[str, str]) -> list[str]:
    """Rule 2: one line per flag of `layer` that a rung of `rung`'s chain sets, unless the site
    names it under overrides-rungs."""
    from harness.spec.load import _relative

    site: Site | None = knobs.site
    allowed = set(site.overrides_rungs) if site else set()
    problems = []
    for name, value in layer.items():
        owner = provenance.get(name, "")
        if not owner.startswith("rung:") or name in allowed:
            continue
        owner_id = owner.removeprefix("rung:")
        file = _relative(knobs.root / "ladder" / f"{owner_id}.yaml")
        inherited = f", inherited by {rung}" if owner_id != rung else ""
        where = f"the site file {site.source}" if site else "a site file (--site FILE)"
        fix = f"list {name} under overrides-rungs: in {where} to replace it on every rung"
        current = knobs_value(knobs, owner_id, name)
        if is_placeholder(current):
            fix = f"give the real path of {current} under paths: in {where} instead (each rung keeps its own checkpoint), or {fix}"
        said = f"--set {name}={value}" if origin == "--set" else f"{origin.removeprefix('site:')}: {name}"
        problems.append(f"{said}: rung {owner_id} sets {name} ({file}{inherited}); not replaced silently: {fix}")
    return problems


def knobs_value(knobs, rung_id: str, name: str) -> FlagValue:
    """The value rung `rung_id` itself writes for `name` (its last section that has it)."""
    changes = knobs.rungs[rung_id].changes
    value = None
    for section in (changes.flags, changes.vime, changes.embedded):
        if name in section:
            value = section[name]
    return value


def fill_paths(knobs, flags: dict[str, FlagValue], provenance: dict[str, str]) -> None:
    """Rule 1: placeholders the site gives a real path for are replaced in place."""
    site: Site | None = knobs.site
    if site is None or not site.paths:
        return
    for name, value in list(flags.items()):
        if isinstance(value, str) and value in site.paths:
            flags[name] = site.paths[value]
            provenance[name] = f"{provenance.get(name, '?')} (path from site:{site.source} paths)"


def _origin_file(origin: str) -> str:
    if origin.startswith("rung:"):
        return f"ladder/{origin.removeprefix('rung:')}.yaml"
    if origin.startswith("stage:"):
        return "stages.yaml"
    if origin == "base" or origin.startswith("mode:"):
        return "base.yaml"
    return origin


def launch_problems(spec, site_source: str | None) -> list[str]:
    """Rule 3: one line per flag still holding a placeholder when a vime-backend run is launched."""
    if not (backends.backend(spec.backend).on_cluster and backends.backend(spec.backend).launches):
        return []
    where = f"the site file {site_source}" if site_source else f"a site file passed with --site (see {EXAMPLE_SITE})"
    return [
        f"--{name} {value}: a placeholder from knobs/{_origin_file(spec.provenance.get(name, '?'))} reached a launch; "
        f"set its real path in {where} under paths: ({value!r}: /real/path)"
        for name, value in spec.flags.items()
        if is_placeholder(value)
    ]
