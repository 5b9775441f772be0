"""The boundary envelopes' calibration (harness.attribution.envelope_calibration) on synthetic
tables (no runs), the calibration seeds kept apart from every design.yaml range
(harness.spec.calibration_file), and thresholds.boundary_envelope_k held to the recorded
calibration (knobs/calibration.yaml, written by tools/calibrate_envelopes.py)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness import DEFAULT_KNOBS_DIR
from harness.attribution import envelope_calibration as cal
from harness.spec import SpecError, load_knobs
from harness.spec.calibration_file import CALIBRATION_FILE, load_calibration
from harness.spec.design_file import load_design

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import calibrate_envelopes  # noqa: E402

BOUNDARIES = ["embedding", "layer.0.attention", "logsumexp", "selected_logprob"]


def _samples(ratio: float, n: int, tokens: int, rng: np.random.Generator, spread: float = 0.05) -> list[cal.SampleSums]:
    """n samples whose divergence scatters around ratio x envelope."""
    out = []
    for _ in range(n):
        envelope = float(rng.uniform(1.0, 2.0))
        out.append(cal.SampleSums(envelope * ratio * float(rng.normal(1.0, spread)), envelope, tokens * 8, tokens))
    return out


def _run(rung: str, kind: str, seed: int, ratios: dict[str, float], planted_at: str | None = None, n: int = 32, tokens: int = 20):
    rng = np.random.default_rng(seed)
    return cal.CalibrationRun(f"{rung}-{seed}", rung, kind, seed, planted_at, {b: _samples(r, n, tokens, rng) for b, r in ratios.items()})


def _calibration(aligned_top: float = 1.0, control: float = 3000.0, tokens: int = 20) -> list[cal.CalibrationRun]:
    runs = []
    for seed in (1, 2):
        runs.append(
            _run(
                "near-aligned",
                cal.ALIGNED,
                seed,
                {"embedding": 0.5, "layer.0.attention": 0.6, "logsumexp": aligned_top, "selected_logprob": 0.9},
                tokens=tokens,
            )
        )
        runs.append(_run("fp32-floor", cal.ALIGNED, seed, {b: 0.7 for b in BOUNDARIES}, tokens=tokens))
        # the fault's own boundary and, downstream, a boundary it also breaks
        ratios = {"embedding": 0.5, "layer.0.attention": 0.6, "logsumexp": control, "selected_logprob": 9.0 * control}
        runs.append(_run("rollout-lse-bf16", cal.CONTROL, seed, ratios, planted_at="logsumexp", tokens=tokens))
    return runs


def _figures(runs, resamples: int = 500) -> list[cal.Figure]:
    return cal.figures_of(cal.rung_figures(runs, 0.95, resamples))


def test_a_ratio_is_the_tables_mean_ratio_with_its_conventions():
    assert float(cal.ratio_of_sums(np.array([1.0, 3.0]), np.array([2.0, 2.0]))) == 1.0  # sum(d) / sum(e): mean over mean
    assert float(cal.ratio_of_sums(np.zeros(3), np.zeros(3))) == 0.0  # both exact: nothing to explain
    assert math.isinf(float(cal.ratio_of_sums(np.ones(3), np.zeros(3))))
    assert math.isnan(float(cal.ratio_of_sums(np.array([1.0, math.nan]), np.ones(2))))


def test_the_interval_covers_the_ratio_and_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    few = cal.boundary_ratio(_samples(1.0, 8, 20, rng, spread=0.2), 0.95, 2000)
    many = cal.boundary_ratio(_samples(1.0, 200, 20, rng, spread=0.2), 0.95, 2000)
    for est in (few, many):
        assert est.low <= est.ratio <= est.high
    assert many.high - many.low < few.high - few.low
    assert many.tokens == 200 * 20 and many.samples == 200
    # one sample has no spread to resample: no interval, never a zero-width one
    one = cal.boundary_ratio(_samples(1.0, 1, 20, rng), 0.95, 2000)
    assert math.isnan(one.low) and math.isnan(one.high)
    # identical samples (an exact-zero divergence on the fp32 floor): the ratio is the interval
    zeros = cal.boundary_ratio([cal.SampleSums(0.0, 0.0, 10, 5)] * 4, 0.95, 2000)
    assert (zeros.ratio, zeros.low, zeros.high) == (0.0, 0.0, 0.0)


def test_k_is_the_geometric_midpoint_of_what_aligned_engines_reach_and_the_mildest_fault():
    figures = _figures(_calibration(aligned_top=1.0, control=3000.0))
    k = cal.derive_k(figures, min_tokens=1000)
    top = max((f for f in figures if f.kind == cal.ALIGNED), key=lambda f: f.high)
    planted = [f for f in figures if f.kind == cal.CONTROL and f.boundary == "logsumexp"]
    assert top.boundary == "logsumexp" and k.aligned_upper == top.high and k.aligned_at == "near-aligned logsumexp"
    # only the control's planted boundary counts: neither its upstream (aligned-like) nor its downstream rows
    assert k.control_lower == planted[0].low and k.control_at == "rollout-lse-bf16 logsumexp"
    assert k.value == cal.round_significant(math.sqrt(top.high * planted[0].low))
    assert 40 < k.value < 70  # sqrt(~1 x ~3000)
    assert k.value / k.aligned_upper == pytest.approx(k.control_lower / k.value, rel=0.05)
    # a larger aligned ratio moves k up, a milder fault moves it down
    assert cal.derive_k(_figures(_calibration(aligned_top=2.0)), 1000).value > k.value
    assert cal.derive_k(_figures(_calibration(control=300.0)), 1000).value < k.value


def test_a_calibration_that_cannot_give_k_says_why():
    with pytest.raises(cal.NoK, match=r"fewer than 1000 captured tokens at: near-aligned embedding \(640\)"):
        cal.derive_k(_figures(_calibration(tokens=10)), 1000)
    with pytest.raises(cal.NoK, match="does not separate aligned from planted faults"):
        cal.derive_k(_figures(_calibration(aligned_top=5.0, control=2.0)), 1000)
    runs = [r for r in _calibration() if r.kind == cal.ALIGNED]
    with pytest.raises(cal.NoK, match="no control"):
        cal.derive_k(_figures(runs), 1000)
    broken = _calibration()
    broken[0].boundaries["logsumexp"][0] = cal.SampleSums(math.nan, 1.0, 8, 20)
    with pytest.raises(cal.NoK, match="no finite ratio and interval at: near-aligned logsumexp"):
        cal.derive_k(_figures(broken), 1000)


def test_the_record_gives_its_own_k():
    """tools/calibrate_envelopes.py derives k from the rounded figures it writes, so a record read
    back gives the same k."""
    calibration = load_calibration(DEFAULT_KNOBS_DIR)
    rungs = cal.rung_figures(_calibration(), 0.95, 500)
    measured = calibrate_envelopes.record(calibration, rungs, Path("runs"), ["abc"], ["a machine"])
    measured = yaml.safe_load(yaml.safe_dump(measured))
    k = cal.derive_k(calibrate_envelopes.recorded_figures(measured), calibration.runs.min_tokens)
    assert measured["k"]["value"] == k.value


def test_boundary_envelope_k_is_the_recorded_calibrations_k():
    """A hand edit of the knob, or of a recorded figure, fails here."""
    calibration = load_calibration(DEFAULT_KNOBS_DIR)
    if not calibration.measured:
        pytest.fail(f"knobs/{CALIBRATION_FILE} records no calibration: run tools/calibrate_envelopes.py --launch, then --summarize --write")
    derived = cal.derive_k(calibrate_envelopes.recorded_figures(calibration.measured), calibration.runs.min_tokens)
    assert calibration.measured["k"]["value"] == derived.value, "the record's k is not what its own figures give"
    knob = load_knobs(DEFAULT_KNOBS_DIR).thresholds["boundary_envelope_k"]
    assert knob.value == derived.value, f"thresholds.boundary_envelope_k = {knob.value}, the calibration gives {derived.value}"
    assert CALIBRATION_FILE in knob.reason, "its reason must cite the calibration record"
    assert calibration.seeds.seeds == calibration.measured["seeds"], "the record was measured on other seeds than knobs/calibration.yaml names"


def _own_calibration(aligned_top: float = 2.0, mild: float = 8.0) -> list[cal.CalibrationRun]:
    """Aligned rungs and controls with own-input sums: the aligned rollout reaches aligned_top at
    final_norm; an fp32-floor control (thousands) and an own-check control at the size of interest
    (mild) on its planted side, the other side at 1; the own control's cross ratio sits at 1.5."""
    runs = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)

        def own(ratios: dict[str, dict[str, float]], rng=rng):
            return {b: {side: _samples(r, 32, 40, rng) for side, r in sides.items()} for b, sides in ratios.items()}

        aligned = _run("near-aligned", cal.ALIGNED, seed, {"layer.0.attention": 0.6, "final_norm": 0.7}, tokens=40)
        aligned.own = own({"layer.0.attention": {"trainer": 1.0, "rollout": 1.0}, "final_norm": {"trainer": 1.0, "rollout": aligned_top}})
        floor = _run("trainer-softmax-bf16", cal.CONTROL, seed, {"layer.0.attention": 4000.0, "final_norm": 1.0}, "layer.0.attention", tokens=40)
        floor.planted_side = "trainer"
        floor.own = own({"layer.0.attention": {"trainer": 8000.0, "rollout": 1.0}, "final_norm": {"trainer": 1.0, "rollout": 1.0}})
        sized = _run("trainer-softmax-bits:3", cal.OWN_CONTROL, seed, {"layer.0.attention": 1.5, "final_norm": 0.7}, "layer.0.attention", tokens=40)
        sized.planted_side = "trainer"
        # the rollout side of the planted boundary is higher than the trainer's: only the planted side counts
        sized.own = own({"layer.0.attention": {"trainer": mild, "rollout": 50.0}, "final_norm": {"trainer": 1.0, "rollout": aligned_top}})
        runs += [aligned, floor, sized]
    return runs


def test_k_own_is_the_midpoint_of_every_aligned_side_and_each_control_at_its_side():
    rungs = cal.rung_figures(_own_calibration(), 0.95, 500)
    own = cal.derive_own_k(cal.own_figures_of(rungs), min_tokens=1000)
    assert own.aligned_at == "near-aligned final_norm (rollout)" and 1.9 < own.aligned_upper < 2.2
    assert own.control_at == "trainer-softmax-bits:3 layer.0.attention (trainer)" and 7.0 < own.control_lower < 8.0
    assert own.value == cal.round_significant(math.sqrt(own.aligned_upper * own.control_lower))
    # the cross-engine k does not read the own-check control (its 1.5x at layer.0.attention would undo k)
    k = cal.derive_k(cal.figures_of(rungs), min_tokens=1000)
    assert k.control_at == "trainer-softmax-bf16 layer.0.attention" and k.value > 40
    with pytest.raises(cal.NoK, match=r"does not separate .* \(near-aligned final_norm \(rollout\)\), the mildest control"):
        cal.derive_own_k(cal.own_figures_of(cal.rung_figures(_own_calibration(aligned_top=9.0), 0.95, 500)), 1000)


def test_the_record_gives_its_own_k_own():
    calibration = load_calibration(DEFAULT_KNOBS_DIR)
    rungs = cal.rung_figures(_own_calibration(), 0.95, 500)
    measured = yaml.safe_load(yaml.safe_dump(calibrate_envelopes.record(calibration, rungs, Path("runs"), ["abc"], ["a machine"])))
    own = cal.derive_own_k(calibrate_envelopes.recorded_own_figures(measured), calibration.runs.min_tokens)
    assert measured["k_own"]["value"] == own.value
    assert measured["rungs"]["trainer-softmax-bits:3"]["planted_side"] == "trainer"


def test_boundary_own_k_is_the_recorded_calibrations_k_own():
    """A hand edit of thresholds.boundary_own_k, or of a recorded own figure, fails here."""
    calibration = load_calibration(DEFAULT_KNOBS_DIR)
    if "k_own" not in calibration.measured:
        pytest.fail(f"knobs/{CALIBRATION_FILE} records no k_own: run tools/calibrate_envelopes.py --launch, then --summarize --write")
    derived = cal.derive_own_k(calibrate_envelopes.recorded_own_figures(calibration.measured), calibration.runs.min_tokens)
    assert calibration.measured["k_own"]["value"] == derived.value, "the record's k_own is not what its own figures give"
    knob = load_knobs(DEFAULT_KNOBS_DIR).thresholds["boundary_own_k"]
    assert knob.value == derived.value, f"thresholds.boundary_own_k = {knob.value}, the calibration gives {derived.value}"
    assert CALIBRATION_FILE in knob.reason, "its reason must cite the calibration record"
    # every own-check control of knobs/calibration.yaml was measured at its planted side
    recorded = calibration.measured["rungs"]
    for fault, control in calibration.own.controls.items():
        assert recorded[fault]["kind"] == cal.OWN_CONTROL and recorded[fault]["planted_side"] == control.side, fault
        assert recorded[fault]["own"][control.at][control.side]["low"] >= derived.control_lower


def _knobs_copy(tmp_path: Path, first: int) -> Path:
    root = tmp_path / "knobs"
    shutil.copytree(DEFAULT_KNOBS_DIR, root)
    text = (root / CALIBRATION_FILE).read_text()
    current = load_calibration(DEFAULT_KNOBS_DIR).seeds.first
    (root / CALIBRATION_FILE).write_text(text.replace(f"first: {current}", f"first: {first}", 1))
    return root


_NEXT_SWEEP = load_design(DEFAULT_KNOBS_DIR).seeds


@pytest.mark.parametrize(
    ("first", "key"),
    [
        (2027, "seeds.judging"),  # a replicate of the judging seed
        (2030, "seeds.judging"),  # the A/B's fifth pair
        (1233, "seeds.design"),  # 1233..1234 reaches the design seed
        # a seed of the next confirmatory range (knobs/design.yaml; it moves as sweeps spend offsets)
        (_NEXT_SWEEP.judging + _NEXT_SWEEP.sweep_offsets[0] + 3, f"seeds.sweep_offsets ({_NEXT_SWEEP.sweep_offsets[0]:+d})"),
    ],
)
def test_calibration_seeds_that_a_judged_or_design_run_uses_are_an_error(tmp_path, first, key):
    root = _knobs_copy(tmp_path, first)
    with pytest.raises(SpecError) as err:
        load_calibration(root)
    (line,) = err.value.problems
    assert line.startswith(f"{root / CALIBRATION_FILE}: seeds.first: expected calibration seeds"), line
    assert f"design.yaml {key} " in line, line


def test_the_calibration_seeds_are_apart_from_every_design_range():
    calibration = load_calibration(DEFAULT_KNOBS_DIR)  # raises when they are not
    assert len(calibration.seeds.seeds) == calibration.seeds.count


def test_the_tool_refuses_a_seed_or_run_it_does_not_calibrate(capsys):
    assert calibrate_envelopes.main(["--launch", "--seed", "2026"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --seed 2026: expected a calibration seed of knobs/calibration.yaml")
    assert calibrate_envelopes.main(["--launch", "--only", "top-p"]) == 2
    assert "error: --only top-p: expected an aligned rung or control" in capsys.readouterr().err
