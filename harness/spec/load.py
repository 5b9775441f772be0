"""Load the knobs directory: read YAML, validate against the schema, index rungs, check links.

Layered like lm-evaluation-harness's task loading (read -> index -> build), but a broken file is
never dropped: it is a SpecError naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.spec.errors import KnobError, SpecError, shown
from harness.spec.schema import (
    ABFile,
    AcceptanceFile,
    BaseConfig,
    ClassificationFile,
    FlagLayer,
    Hardware,
    NamedReport,
    ReportsFile,
    Rung,
    Stage,
    StagesFile,
    Threshold,
    ThresholdsFile,
)
from harness.spec.values import flag_value_problems

if TYPE_CHECKING:
    from harness.spec.budget import RunBudgets
    from harness.spec.candidate_file import CandidateFile
    from harness.spec.effects_file import Effects
    from harness.spec.levers import LeverFile
    from harness.spec.readiness_file import ReadinessFile
    from harness.spec.site import Site

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Knobs:
    """The whole experiment spec, typed. `root` is the directory it came from."""

    root: Path
    base: BaseConfig
    stages: dict[str, Stage]
    rungs: dict[str, Rung]
    thresholds: dict[str, Threshold]
    acceptance: AcceptanceFile
    classification: ClassificationFile
    ab: ABFile
    # The operator bench's tolerances (operator_thresholds.yaml, the same shape as thresholds.yaml).
    operator_thresholds: dict[str, Threshold] = field(default_factory=dict)
    # Node types named by the stages (stages.yaml `hardware:`): GPUs per node for VIME's placement.
    hardware: dict[str, Hardware] = field(default_factory=dict)
    # How long a launched run may take per stage (launch.yaml); None where the file is absent.
    budgets: RunBudgets | None = None
    # Each question's minimum effect of interest and every judged spec's A/A seed spread (effects.yaml).
    effects: Effects | None = None
    # The named reports an answer may leave the main job's answers for (reports.yaml), with why.
    reports: dict[str, NamedReport] = field(default_factory=dict)
    # Layered on by harness.spec.site.with_settings: a cluster's site file and session-wide --set
    # values, applied by every resolve() (knobs < site < --set).
    site: Site | None = None
    sets: dict = field(default_factory=dict)
    # One lever per boundary and the drift budget's policy (levers.yaml); None where the file is absent.
    levers: LeverFile | None = None
    # The candidate operator's A/B and negative control (candidate.yaml); None where the file is absent.
    candidate: CandidateFile | None = None
    # The seed's readiness criteria and the mismatch knobs (readiness.yaml); None where the file is absent.
    readiness: ReadinessFile | None = None

    def threshold(self, name: str) -> float:
        if name not in self.thresholds:
            raise SpecError(
                f"{self.root / 'thresholds.yaml'}: thresholds.{name}: expected a threshold with this name (known: {', '.join(sorted(self.thresholds))})"
            )
        return self.thresholds[name].value

    def chain(self, rung_id: str) -> list[Rung]:
        """The rung's ancestry, root first, the rung itself last."""
        chain = []
        current: str | None = rung_id
        while current is not None:
            chain.append(self.rungs[current])
            current = self.rungs[current].parent
        return chain[::-1]


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# A knob file is a page of YAML; anything this large is not one (and would be read whole).
MAX_KNOB_FILE_BYTES = 4 << 20
# Aliases may share a block (stages.yaml shares its embedded profile), but the expanded document
# stays small: a 1 KB "billion laughs" file expands to millions of nodes and an 8 MB error line.
MAX_EXPANDED_NODES = 100_000


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error: PyYAML keeps
    the last one without a word, so a rung that sets a flag twice would run with whichever came last."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` then an explicit key is YAML's override, not a repeat
                key = self.construct_object(key_node, deep=True)
                try:
                    seen_at = first_line.get(key)
                except TypeError:
                    continue  # unhashable key: SafeLoader itself reports it
                line = key_node.start_mark.line + 1
                if seen_at is not None:
                    raise _DuplicateKey(
                        problem=f"key {key!r} given twice (lines {seen_at} and {line}); PyYAML would keep only the last",
                        problem_mark=key_node.start_mark,
                    )
                first_line[key] = line
        return super().construct_mapping(node, deep)


def _expanded_size(node, sizes: dict, open_nodes: set) -> int:
    """Nodes the document has once every alias is expanded (memoised per node: linear time)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.YAMLError("an alias refers to the mapping or list that contains it (recursive alias)")
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    total = 1
    for child in children:
        total += _expanded_size(child, sizes, open_nodes)
        if total > MAX_EXPANDED_NODES:
            raise yaml.YAMLError(
                f"aliases expand this document past {MAX_EXPANDED_NODES} nodes (an alias bomb?); write the values out or share fewer"
            )
    open_nodes.discard(key)
    sizes[key] = total
    return total


def _read_text(path: Path, name: str) -> str:
    if path.is_dir():
        raise KnobError(name, "", "a YAML file, got a directory", has_got=False)
    try:
        size = path.stat().st_size
        if size > MAX_KNOB_FILE_BYTES:
            raise KnobError(name, "", f"a knob file under {MAX_KNOB_FILE_BYTES >> 20} MiB, got {size} bytes", has_got=False)
        data = path.read_bytes()
    except OSError as err:
        raise KnobError(name, "", f"a readable file ({err.strerror or type(err).__name__})", has_got=False) from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise KnobError(name, "", f"YAML text, got binary data (NUL byte at offset {nul})", has_got=False)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise KnobError(name, "", f"UTF-8 YAML text, got byte 0x{data[err.start]:02x} at offset {err.start}", has_got=False) from None


def load_yaml_text(text: str) -> object:
    """Parse YAML with StrictLoader and a bound on alias expansion; raises yaml.YAMLError."""
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: Path) -> object:
    name = _relative(path)
    if not path.exists():
        raise KnobError(name, "", "this file to exist", has_got=False)
    text = _read_text(path, name)
    try:
        return load_yaml_text(text)
    except RecursionError:
        raise KnobError(name, "", "YAML nested less deeply (Python's recursion limit was reached)", has_got=False) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise KnobError(name, where, f"valid YAML ({problem})", has_got=False) from None


def parse_file(path: Path, model: type[Model]) -> Model:
    """Read one YAML file into `model`; every schema problem becomes one line naming the key."""
    data = read_yaml(path)
    name = _relative(path)
    if not isinstance(data, dict):
        raise KnobError(name, "", "a mapping at the top level", data)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise SpecError([_describe(name, e, data) for e in _merge_union_branches(err.errors())]) from None


# The names pydantic gives the members of a union such as `float | int` in an error's location.
_UNION_MEMBER = ("float", "int", "str", "bool", "list[", "dict[", "literal[")


def _merge_union_branches(errors: list[dict]) -> list[dict]:
    """A value that fits no member of a union (`value: float | int`) comes back once per member
    (`...value.float`, `...value.int`); make it one error for the key, naming every member."""
    merged: dict[tuple, dict] = {}
    for error in errors:
        if not error["loc"]:  # a model-level rule (several keys together): no key path to merge on
            merged[(id(error),)] = error
            continue
        *head, last = error["loc"]
        if isinstance(last, str) and last.startswith(_UNION_MEMBER) and head:
            key = tuple(head)
            if key in merged:
                merged[key]["members"].append(last)
                continue
            merged[key] = {**error, "loc": tuple(head), "members": [last]}
        else:
            merged[(id(error),)] = error
    out = []
    for error in merged.values():
        members = error.pop("members", None)
        if members and len(members) > 1:
            error = {**error, "type": "union", "msg": f"one of {' or '.join(members)}"}
        elif members:  # a lone member tag is an ordinary key path after all
            error = {**error, "loc": (*error["loc"], members[0])}
        out.append(error)
    return out


def _describe(file: str, error: dict, data: dict) -> str:
    key = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{file}: {key}: unknown key (not part of the schema; check the spelling)"
    if kind == "missing":
        return f"{file}: {key}: required key is missing"
    got = error.get("input")
    found = f", got {shown(got)} (type={type(got).__name__})" if not isinstance(got, dict) else ""
    return f"{file}: {key}: expected {error['msg'].removeprefix('Input should be ').removeprefix('Value error, ')}{found}"


def load_knobs(root: Path) -> Knobs:
    root = Path(root)
    if not root.is_dir():
        raise SpecError(f"{root}: expected a knobs directory (base.yaml, stages.yaml, ladder/, thresholds.yaml, acceptance.yaml)")
    base = parse_file(root / "base.yaml", BaseConfig)
    stages_file = parse_file(root / "stages.yaml", StagesFile)
    stages = stages_file.stages
    thresholds = parse_file(root / "thresholds.yaml", ThresholdsFile).thresholds
    acceptance = parse_file(root / "acceptance.yaml", AcceptanceFile)
    classification = parse_file(root / "classification.yaml", ClassificationFile)
    rungs = _load_rungs(root / "ladder")
    ab = parse_file(root / "ab.yaml", ABFile)
    operator_thresholds = parse_file(root / "operator_thresholds.yaml", ThresholdsFile).thresholds
    budgets = _load_budgets(root / "launch.yaml", stages)
    effects = _load_effects(root)
    reports = parse_file(root / "reports.yaml", ReportsFile).reports
    levers = _load_levers(root / "levers.yaml", rungs, thresholds)
    knobs = Knobs(
        root,
        base,
        stages,
        rungs,
        thresholds,
        acceptance,
        classification,
        ab,
        hardware=stages_file.hardware,
        operator_thresholds=operator_thresholds,
        budgets=budgets,
        effects=effects,
        reports=reports,
        levers=levers,
    )
    _check_flag_values(knobs)
    _check_links(knobs)
    return _with_candidate_and_readiness(root, knobs)


def _with_candidate_and_readiness(root: Path, knobs: Knobs) -> Knobs:
    """candidate.yaml and readiness.yaml, each optional, parsed and linked to the rest of the spec."""
    from dataclasses import replace

    from harness.spec.candidate_file import CANDIDATE_FILE, CandidateFile
    from harness.spec.candidate_load import check_candidate, check_readiness
    from harness.spec.readiness_file import READINESS_FILE, ReadinessFile

    found = {}
    for name, file, model, check in (
        ("candidate", CANDIDATE_FILE, CandidateFile, check_candidate),
        ("readiness", READINESS_FILE, ReadinessFile, check_readiness),
    ):
        path = root / file
        if path.exists():
            found[name] = parse_file(path, model)
            check(found[name], _relative(path), knobs)
    return replace(knobs, **found) if found else knobs


def _load_effects(root: Path):
    """effects.yaml: the questions' effects of interest. Required: a question without one cannot be judged."""
    from harness.spec.effects_file import EFFECTS_FILE, Effects

    return parse_file(root / EFFECTS_FILE, Effects)


def _load_budgets(path: Path, stages: dict[str, Stage]):
    """launch.yaml: per-stage run budgets. Optional, so a copied knobs/ without it still loads
    (launches then keep the fixed default time limit)."""
    from harness.spec.budget import RunBudgets

    if not path.exists():
        return None
    budgets = parse_file(path, RunBudgets)
    unknown = [name for name in budgets.stages if name not in stages]
    if unknown:
        raise SpecError(f"{_relative(path)}: stages.{unknown[0]}: expected a stage of stages.yaml ({', '.join(stages)}), got {unknown[0]!r}")
    return budgets


def _load_levers(path: Path, rungs: dict[str, Rung], thresholds: dict[str, Threshold]):
    """levers.yaml: the lever table and the drift budget's policy. Optional, as launch.yaml is."""
    from harness.spec.levers import LeverFile

    if not path.exists():
        return None
    levers = parse_file(path, LeverFile)
    share = levers.budget.min_localised_share.threshold
    if share not in thresholds:
        raise SpecError(f"{_relative(path)}: budget.min_localised_share.threshold: expected a threshold of thresholds.yaml, got {share!r}")
    unknown = [rung for rung in levers.budget.rungs if rung not in rungs or levers.budget.stage not in rungs[rung].stages]
    if unknown:
        raise SpecError(
            f"{_relative(path)}: budget.rungs: expected rungs of ladder/ that run at budget.stage {levers.budget.stage}, got {unknown[0]!r}"
        )
    return levers


def _load_rungs(ladder_dir: Path) -> dict[str, Rung]:
    rungs: dict[str, Rung] = {}
    problems: list[str] = []
    for path in sorted(ladder_dir.glob("*.yaml")):
        try:
            rung = parse_file(path, Rung)
        except SpecError as err:
            problems.extend(err.problems)
            continue
        if rung.id != path.stem:
            problems.append(f"{_relative(path)}: id: expected the file's name {path.stem!r}, got {rung.id!r}")
        rungs[rung.id] = rung
    if problems:
        raise SpecError(problems)
    if not rungs:
        raise SpecError(f"{_relative(ladder_dir)}: expected at least one rung file (*.yaml)")
    return rungs


def _layer_problems(where: str, prefix: str, layer: FlagLayer) -> list[str]:
    return [
        problem for section in ("flags", "vime", "embedded") for problem in flag_value_problems(where, f"{prefix}{section}.", getattr(layer, section))
    ]


def _check_flag_values(knobs: Knobs) -> None:
    """Every flag value in every file against its rule (values.py), before anything merges them."""
    base = _relative(knobs.root / "base.yaml")
    problems = _layer_problems(base, "", knobs.base)
    for mode, layer in knobs.base.modes.items():
        problems += _layer_problems(base, f"modes.{mode}.", layer)
    for name, stage in knobs.stages.items():
        problems += _layer_problems(_relative(knobs.root / "stages.yaml"), f"stages.{name}.", stage)
    for rung in knobs.rungs.values():
        problems += _layer_problems(_relative(knobs.root / "ladder" / f"{rung.id}.yaml"), "changes.", rung.changes)
    if problems:
        raise SpecError(problems)


def _reported_links(knobs: Knobs) -> list[str]:
    """Every answer that leaves the main job's answers names a report of reports.yaml."""
    known = ", ".join(sorted(knobs.reports))
    where: list[tuple[str, str, str]] = []
    for rung in knobs.rungs.values():
        where += [(f"ladder/{rung.id}.yaml", f"expect.reported.{answer}.report", r.report) for answer, r in rung.expect.reported.items()]
    for criterion in knobs.acceptance.criteria:
        where += [("acceptance.yaml", f"criteria.{criterion.id}.reported.{backend}.report", r.report) for backend, r in criterion.reported.items()]
    expectations = [("expect", knobs.ab.expect)] + [(f"candidates.{name}.expect", c.expect) for name, c in knobs.ab.candidates.items()]
    for prefix, by_backend in expectations:
        for backend, expected in by_backend.items():
            for question, answer in expected.answers.items():
                if not isinstance(answer, bool):
                    where.append(("ab.yaml", f"{prefix}.{backend}.answers.{question}.report", answer.report))
    return [
        f"{_relative(knobs.root / file)}: {key}: expected a report of reports.yaml ({known}), got {name!r}"
        for file, key, name in where
        if name not in knobs.reports
    ]


def _check_links(knobs: Knobs) -> None:
    """Parents exist and form no cycle; stages named by rungs exist; thresholds named exist."""
    problems = []
    ladder = knobs.root / "ladder"
    for rung in knobs.rungs.values():
        where = _relative(ladder / f"{rung.id}.yaml")
        if rung.parent is not None and rung.parent not in knobs.rungs:
            problems.append(f"{where}: parent: expected one of the rungs ({', '.join(sorted(knobs.rungs))}), got {rung.parent!r}")
        for stage in rung.stages:
            if stage not in knobs.stages:
                problems.append(f"{where}: stages: expected stages from stages.yaml ({', '.join(knobs.stages)}), got {stage!r}")
    if problems:
        raise SpecError(problems)
    for rung in knobs.rungs.values():
        seen = [rung.id]
        current = rung.parent
        while current is not None:
            if current in seen:
                cycle = " -> ".join(seen + [current])
                raise SpecError(f"{_relative(ladder / f'{rung.id}.yaml')}: parent: expected a chain that ends at a root rung, got a cycle {cycle}")
            seen.append(current)
            current = knobs.rungs[current].parent
    for rung in knobs.rungs.values():
        if rung.parent is not None and rung.expect.direction is None and "direction" not in rung.expect.reported:
            problems.append(
                f"{_relative(ladder / f'{rung.id}.yaml')}: expect.direction: expected one of up, down, flat against the parent, "
                "or reported.direction naming the report it leaves for"
            )
        for bound, name in rung.expect.bound_names().items():
            if name not in knobs.thresholds:
                problems.append(f"{_relative(ladder / f'{rung.id}.yaml')}: expect.{bound}: expected a name from thresholds.yaml, got {name!r}")
    pair = knobs.ab.pair
    for side in ("baseline", "candidate"):
        rung_id = getattr(pair, side)
        if rung_id not in knobs.rungs:
            problems.append(
                f"{_relative(knobs.root / 'ab.yaml')}: pair.{side}: expected one of the rungs ({', '.join(sorted(knobs.rungs))}), got {rung_id!r}"
            )
        elif pair.stage not in knobs.rungs[rung_id].stages:
            problems.append(
                f"{_relative(knobs.root / 'ab.yaml')}: pair.stage: {rung_id} runs at {', '.join(knobs.rungs[rung_id].stages)}, not {pair.stage!r}"
            )
    allowed = set(knobs.ab.operator_path_flags.flags) | set(knobs.ab.mitigation_flags.flags)
    for name, candidate in knobs.ab.candidates.items():
        for flag in sorted(set(candidate.set) - allowed):
            problems.append(
                f"{_relative(knobs.root / 'ab.yaml')}: candidates.{name}.set: expected operator-path or mitigation flags "
                f"({', '.join(sorted(allowed))}), got {flag!r}"
            )
    problems += _reported_links(knobs)
    if knobs.levers is not None:
        problems += [
            f"{_relative(knobs.root / 'levers.yaml')}: budget.expect.{rung}.report: expected a report of reports.yaml "
            f"({', '.join(sorted(knobs.reports))}), got {e.report!r}"
            for rung, e in knobs.levers.budget.expect.items()
            if e.report is not None and e.report not in knobs.reports
        ]
    for criterion in knobs.acceptance.criteria:
        for name in criterion.thresholds:
            if name not in knobs.thresholds:
                problems.append(
                    f"{_relative(knobs.root / 'acceptance.yaml')}: criteria.{criterion.id}.thresholds: expected names from thresholds.yaml, got {name!r}"
                )
    if problems:
        raise SpecError(problems)
