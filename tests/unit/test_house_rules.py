"""House rules, enforced: thresholds are data that is used, rungs explain themselves, and the layers keep apart."""

from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def code_text() -> str:
    files = [
        *(REPO_ROOT / "harness").rglob("*.py"),
        *(REPO_ROOT / "tests").rglob("*.py"),
        *(REPO_ROOT / "fixtures").rglob("*.py"),
        # Files that name the thresholds their checks read (the code reads them by these names).
        REPO_ROOT / "knobs" / "acceptance.yaml",
        REPO_ROOT / "knobs" / "readiness.yaml",
    ]
    return "\n".join(Path(f).read_text() for f in files)


def test_every_threshold_is_used_somewhere():
    text = code_text()
    bounds = {name for rung in KNOBS.rungs.values() for name in rung.expect.bound_names().values()}  # ladder/*.yaml expect.max_*
    unused = [
        name
        for name in KNOBS.thresholds
        if f'"{name}"' not in text
        and f"'{name}'" not in text
        and f" {name}," not in text
        and f"[{name}" not in text
        and f" {name}]" not in text
        and name not in bounds
    ]
    assert not unused, f"thresholds.yaml names thresholds nothing reads: {unused}"


def test_every_rung_says_why_and_what_it_expects():
    """Every answer a rung gives is expected or leaves for a named report: a class (or reported.class),
    a direction against the parent (or reported.direction), none on a root, and the design that sized it."""
    for rung in KNOBS.rungs.values():
        where = f"ladder/{rung.id}.yaml"
        expect = rung.expect
        assert len(rung.why.split()) >= 8, f"{where}: why: say in a sentence why this rung exists"
        assert expect.design, f"{where}: expect needs the design question that sized it (knobs/design.yaml)"
        assert expect.class_expected or "class" in expect.reported, f"{where}: expect needs a class, or reported.class naming its report"
        has_direction = expect.direction_expected or "direction" in expect.reported
        assert (rung.parent is None) == (not has_direction), f"{where}: a direction against the parent (expected or reported), none on a root"


def test_the_ladder_has_one_root_and_reaches_the_recommended_baseline():
    # One root per model: the dense ladder's floor, and the MoE profile's baseline (routing-replay's
    # parent; a different model is not a knob, so it has no parent to be compared with).
    roots = sorted(r.id for r in KNOBS.rungs.values() if r.parent is None)
    assert roots == ["fp32-floor", "fp8-plus-filters-moe"]
    assert [r.id for r in KNOBS.chain("fp8-plus-filters")] == ["fp32-floor", "near-aligned", "fp8-rollout", "fp8-plus-filters"]


def _module_imports(path: Path) -> set[str]:
    """Every harness module a file imports, at any depth (function-level imports included)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("harness")}
    return found


def test_judging_and_attribution_never_import_each_other():
    # docs/architecture.md: the judge decides from numbers, attribution localises; neither needs the other.
    for package, other in (("judge", "harness.attribution"), ("attribution", "harness.judge")):
        for path in (REPO_ROOT / "harness" / package).rglob("*.py"):
            crossing = sorted(m for m in _module_imports(path) if m == other or m.startswith(other + "."))
            assert not crossing, f"harness/{package}/{path.name} imports {crossing}"


def test_the_cli_and_the_commands_it_loads_do_not_import_it_back():
    for path in (REPO_ROOT / "harness").rglob("*.py"):
        if path.name != "__main__.py":
            assert "harness.cli" not in _module_imports(path), f"{path.relative_to(REPO_ROOT)} imports harness.cli (an import cycle)"


def test_no_module_reads_a_run_spec_as_a_dict():
    import re

    pattern = re.compile(r"\.spec or \{\}|\.spec\.get\(|\.spec\[[\"']")
    for root in ("harness", "fixtures", "tests"):
        for path in (REPO_ROOT / root).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                assert not pattern.search(line), (
                    f"{path.relative_to(REPO_ROOT)}:{number}: read run.spec's typed fields (harness/records/recorded_spec.py), not a dict: {line.strip()}"
                )
