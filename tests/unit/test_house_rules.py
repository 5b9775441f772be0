"""House rules, enforced: thresholds are data that is used, and rungs explain themselves."""

from pathlib import Path

from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.spec import load_knobs

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def code_text() -> str:
    files = [*(REPO_ROOT / "harness").rglob("*.py"), *(REPO_ROOT / "tests").rglob("*.py"),
             *(REPO_ROOT / "fixtures").rglob("*.py"), REPO_ROOT / "knobs" / "acceptance.yaml"]
    return "\n".join(Path(f).read_text() for f in files)


def test_every_threshold_is_used_somewhere():
    text = code_text()
    bounds = {name for rung in KNOBS.rungs.values() for name in rung.expect.bound_names().values()}  # ladder/*.yaml expect.max_*
    unused = [name for name in KNOBS.thresholds if f'"{name}"' not in text and f"'{name}'" not in text and f" {name}," not in text
              and f"[{name}" not in text and f" {name}]" not in text and name not in bounds]
    assert not unused, f"thresholds.yaml names thresholds nothing reads: {unused}"


def test_every_rung_says_why_and_what_it_expects():
    for rung in KNOBS.rungs.values():
        assert len(rung.why.split()) >= 8, f"ladder/{rung.id}.yaml: why: say in a sentence why this rung exists"
        assert rung.expect.drift_class and rung.expect.direction


def test_the_ladder_has_one_root_and_reaches_the_recommended_baseline():
    roots = [r.id for r in KNOBS.rungs.values() if r.parent is None]
    assert roots == ["fp32-floor"]
    assert [r.id for r in KNOBS.chain("fp8-plus-filters")] == ["fp32-floor", "near-aligned", "fp8-rollout", "fp8-plus-filters"]
