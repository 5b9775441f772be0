"""Pre-registration with teeth: the hash of every expectation and threshold a session applies
(harness.judge.preregistration), and the confirmatory sweep's ledger of spent offsets
(harness.spec.sweep_ledger, python -m harness sweep)."""

from __future__ import annotations

import shutil

import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.experiment import sweep
from harness.judge.preregistration import expectations, expectations_hash, preregistration
from harness.spec import SpecError, load_knobs
from harness.spec.design_file import load_design
from harness.spec.sweep_ledger import load_ledger


@pytest.fixture
def knobs_copy(tmp_path):
    target = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, target)
    return target


def _hash(root):
    return expectations_hash(load_knobs(root), load_design(root))


def test_the_hash_moves_with_a_number_or_an_outcome_and_not_with_prose(knobs_copy):
    before = _hash(knobs_copy)
    thresholds = knobs_copy / "thresholds.yaml"
    thresholds.write_text(thresholds.read_text().replace("Collapse = the late-window mean", "Collapse: the late-window mean"))
    assert _hash(knobs_copy) == before  # a reason is prose
    thresholds.write_text(thresholds.read_text().replace("  reward_collapse_ratio:\n    value: 0.5", "  reward_collapse_ratio:\n    value: 0.4"))
    assert _hash(knobs_copy) != before
    restored = knobs_copy.parent / "restored"
    shutil.copytree(DEFAULT_KNOBS_DIR, restored)
    rung = restored / "ladder" / "top-k.yaml"
    rung.write_text(rung.read_text().replace("direction: up", "direction: flat"))
    assert _hash(restored) != before
    ab = knobs_copy.parent / "pairs"
    shutil.copytree(DEFAULT_KNOBS_DIR, ab)
    (ab / "ab.yaml").write_text((ab / "ab.yaml").read_text().replace("  embedded: 9\n", "  embedded: 10\n", 1))
    assert _hash(ab) != before  # adding pairs is a new pre-registration


def test_the_budget_readiness_and_candidate_expectations_are_registered_and_their_measurements_are_not(knobs_copy):
    """The drift budget's ruled-out levers, a readiness verdict and the candidate's A/B are judged
    answers: changing one is a new pre-registration. What a design tool measured is not one."""
    before = _hash(knobs_copy)
    levers = knobs_copy / "levers.yaml"
    text = levers.read_text()
    assert "      ruled_out: [final-norm]\n" in text
    levers.write_text(text.replace("      ruled_out: [final-norm]\n", "      ruled_out: []\n", 1))
    assert _hash(knobs_copy) != before
    levers.write_text(text.replace("  date: '2026-12-07'", "  date: '2026-12-08'", 1))  # below the marker: evidence
    assert _hash(knobs_copy) == before
    levers.write_text(text)
    readiness = knobs_copy / "readiness.yaml"
    text = readiness.read_text()
    readiness.write_text(text.replace("expect: met", "expect: not met", 1))
    assert _hash(knobs_copy) != before
    readiness.write_text(text)
    candidate = knobs_copy / "candidate.yaml"
    candidate.write_text(candidate.read_text().replace("  embedded: 6\n", "  embedded: 7\n", 1))
    assert _hash(knobs_copy) != before  # a pair added to the candidate's A/B


def test_the_registration_covers_every_expectation_and_threshold():
    knobs = load_knobs(DEFAULT_KNOBS_DIR)
    covered = expectations(knobs, load_design(DEFAULT_KNOBS_DIR))
    assert set(covered["thresholds"]) == set(knobs.thresholds)
    assert set(covered["rungs"]) == set(knobs.rungs)
    assert covered["effects"]["measured"]["specs"]["near-aligned"]["abs_diff"]["relative_sd"] > 0
    entry = preregistration(knobs, load_design(DEFAULT_KNOBS_DIR))
    covers = {"thresholds", "rungs", "ab", "acceptance", "effects", "design", "budget", "readiness", "candidate"}
    assert len(entry["sha256"]) == 64 and covers <= set(entry["covers"])


def test_a_spent_offset_is_refused_naming_the_ledger():
    spent = sorted(load_ledger(DEFAULT_KNOBS_DIR).offsets())
    assert {100, 200, 300, 400, 500} <= set(spent)  # the sweeps before the hash, and every one since
    with pytest.raises(SpecError, match=r"sweep_ledger.yaml: spent: offsets \+300 were judged before"):
        sweep.offsets_to_judge(DEFAULT_KNOBS_DIR, [300])
    assert set(sweep.offsets_to_judge(DEFAULT_KNOBS_DIR, None)).isdisjoint(spent)


def test_an_offset_reaching_another_seed_range_is_refused():
    with pytest.raises(SpecError, match="overlap"):
        sweep.offsets_to_judge(DEFAULT_KNOBS_DIR, [4])


def test_the_sweep_spends_each_offset_as_it_starts_and_stops_when_the_knobs_change(knobs_copy, monkeypatch, tmp_path):
    """Offsets are written to the ledger as they start (a killed sweep spends them too), and a change to
    the expectations midway stops the sweep: no pairs added to a confirmatory range."""
    monkeypatch.setattr(sweep, "SWEEP_DIR", tmp_path / "sweep")
    judged = []

    def fake_offset(offset, mode):
        judged.append(offset)
        thresholds = knobs_copy / "thresholds.yaml"  # someone tightens a threshold after the first offset
        thresholds.write_text(thresholds.read_text().replace("  reward_collapse_ratio:\n    value: 0.5", "  reward_collapse_ratio:\n    value: 0.6"))
        return 0, 1.0

    monkeypatch.setattr(sweep, "run_offset", fake_offset)
    first, second = load_design(knobs_copy).seeds.sweep_offsets[:2]  # the next sweep's: never spent
    args = type("Args", (), {"knobs": str(knobs_copy), "offsets": f"{first},{second}", "mode": "colocate", "summarize": False})()
    with pytest.raises(SpecError, match="changed since the sweep started"):
        sweep.cmd_sweep(args)
    assert judged == [first]
    ledger = load_ledger(knobs_copy)
    (entry,) = [e for e in ledger.spent if e.offset == first]
    judging = load_design(knobs_copy).seeds.judging
    assert entry.seeds[0] == judging + first and entry.expectations_sha256 and entry.result.startswith("main job exit 0")
    with pytest.raises(SpecError, match=rf"offsets \+{first} were judged before"):
        sweep.offsets_to_judge(knobs_copy, [first])
