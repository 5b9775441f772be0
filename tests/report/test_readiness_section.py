"""The page's "Ready for Blackwell operator work?" and the candidate operator's section: each verdict with
its numbers and the target that decided it; a record without them says which target makes them; the
entries survive a write and a load."""

from __future__ import annotations

from harness.report.experiment_page import render_page
from harness.report.experiment_record import add_entry, load_record, new_record, write_record
from harness.report.record_model import CandidatePair, Readiness, TestRef


def _test(name: str) -> TestRef:
    return TestRef(nodeid=f"tests/acceptance/test_readiness.py::test_readiness[{name}]", name=name, title=name)


def _record():
    record = new_record(argv=["pytest", "-m", "acceptance"])
    add_entry(
        record,
        "readiness",
        Readiness(
            id="drift-localised-to-an-operator-boundary",
            seed_text="at least one drift source is localized to a numerical operator boundary",
            verdict="met",
            expected="met",
            message="met: fp8-rollout: localised to fp8-weights (+26.0% [+21.2%, +30.7%])",
            evidence={"verdict": "met"},
            target="make baseline",
            test=_test("drift-localised-to-an-operator-boundary"),
        ),
    )
    add_entry(
        record,
        "readiness",
        Readiness(
            id="near-aligned-low-and-stable",
            seed_text="the near-aligned sanity run has low and stable logprob drift",
            verdict="not checked",
            expected="met",
            message="not checked: LookupError: no run",
            target="make baseline",
            test=_test("near-aligned-low-and-stable"),
        ),
    )
    performance = [
        {
            "figure": {"key": "perf/step_time", "label": "step time", "unit": "s", "better": "lower"},
            "baseline": 0.35,
            "candidate": 1.0,
            "difference": 0.65,
            "ci": [0.6, 0.7],
            "ratio": 2.86,
            "note": "",
        }
    ]
    data = {
        "rung": "fp8-rollout",
        "stage": "p1",
        "seeds": [2026],
        "baseline_runs": ["a"],
        "candidate_runs": ["b"],
        "contract": [],
        "performance": performance,
    }
    add_entry(
        record,
        "candidate",
        CandidatePair(
            name="fp8-rollout", label="the operator reduced drift (embedded-linear-operator)", data=data, target="make candidate", test=_test("pair")
        ),
    )
    return record


def test_the_sections_show_each_verdict_its_numbers_and_its_target(tmp_path):
    record = _record()
    record.outcomes = {e.test.nodeid: "passed" for e in record.readiness}
    page = render_page(record)
    assert "Ready for Blackwell operator work?" in page and "1 of 2 met" in page
    assert "localised to fp8-weights" in page and "not checked" in page and "make baseline" in page
    assert "the operator reduced drift" in page and "2.86x" in page and "step time" in page
    loaded = load_record(write_record(record, tmp_path).parent)
    assert [e.id for e in loaded.readiness] == [e.id for e in record.readiness] and loaded.candidate[0].data == record.candidate[0].data


def test_a_record_without_them_names_the_target_that_makes_them():
    page = render_page(new_record(argv=["pytest"]))
    assert "the main job (make baseline) decides the seed's readiness criteria" in page
    assert "make candidate runs the candidate operator's A/B" in page
