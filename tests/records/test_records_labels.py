"""--backend=records finds a run by its resolved spec: by run id, else by the hash of its full
resolved flags; an ingested VIME log, which records no resolved spec, only by its labels."""

import subprocess
import sys
from pathlib import Path

from fixtures.runs import find_recorded_run
from harness import DEFAULT_KNOBS_DIR, REPO_ROOT
from harness.records.rundir import RunDir
from harness.spec import load_knobs, resolve

LOGS = Path(__file__).parent.parent / "data" / "vime_logs"
KNOBS = load_knobs(DEFAULT_KNOBS_DIR)


def spec(rung, backend="records", **overrides):
    return resolve(KNOBS, "p1", rung, "colocate", backend, overrides)


def test_a_labelled_ingest_is_found_by_rung_and_mode(tmp_path):
    log = sorted(LOGS.glob("*.log"))[0]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "ingest",
            str(log),
            "--out",
            str(tmp_path / "gb200-baseline"),
            "--rung",
            "fp8-plus-filters",
            "--stage",
            "p1",
            "--mode",
            "colocate",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr  # 2 would mean the ingest found problems
    found, how = find_recorded_run(tmp_path, spec("fp8-plus-filters"))
    assert found == tmp_path / "gb200-baseline" and how.startswith("labels"), how
    assert RunDir(found).load().spec.rung == "fp8-plus-filters"
    assert find_recorded_run(tmp_path, spec("fp8-rollout"))[0] is None
    # An A/A seed or a replay is not the baseline: labels cannot tell them apart, so no match.
    missing, why = find_recorded_run(tmp_path, spec("fp8-plus-filters", seed=1235))
    assert missing is None and "labels cannot match a spec with overrides" in why, why


def write_resolved(tmp_path, name, resolved):
    run_dir = RunDir(tmp_path / name).create()
    run_dir.write_spec({**resolved.to_dict(), "run_id": name})
    run_dir.close()
    return tmp_path / name


def test_a_harness_run_is_matched_by_its_flags_not_its_labels(tmp_path):
    baseline = spec("fp8-plus-filters", backend="embedded")
    write_resolved(tmp_path, "recorded-elsewhere", baseline)
    found, how = find_recorded_run(tmp_path, baseline)
    assert found == tmp_path / "recorded-elsewhere" and how.startswith("resolved-spec hash"), how
    # Same rung and mode labels, different resolved flags (an A/A seed): not the baseline.
    aa = spec("fp8-plus-filters", backend="embedded", seed=1235)
    missing, why = find_recorded_run(tmp_path, aa)
    assert missing is None and "resolved-spec hash" in why, why
