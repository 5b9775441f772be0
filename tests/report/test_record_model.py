"""The experiment record's model (harness.report.record_model): a record written before the model
loads and renders unchanged; a misspelt or mistyped key fails in one line naming the file, the key
path and what was expected; the writer rejects a key no reader knows.

tests/data/experiment_record/experiment.json is a real record: a seed-sweep session's (offset +100,
the P1 ladder, acceptance and P3 A/B on the embedded backend), trimmed to stay small: each
environment's argv to its first 12 items, the worst tokens to 3 rows, written without indentation.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from experiment_sample import build_sample_record
from pydantic import ValidationError

from harness.report import experiment_record as entries
from harness.report.experiment_page import render_page
from harness.report.experiment_record import FILE_NAME, RecordError, add_entry, load_record, new_record, write_record

REAL = Path(__file__).resolve().parents[1] / "data" / "experiment_record" / FILE_NAME


def _same(a, b) -> bool:
    """JSON equality with NaN equal to NaN (the writer keeps NaN: "not measured")."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_a_real_record_loads_renders_and_writes_back_the_same(tmp_path):
    record = load_record(REAL)
    assert record.path == str(REAL)
    assert record.rungs and record.ab and record.answers and record.environment and record.worst_tokens is not None
    page = render_page(record)
    for rung in record.rungs:
        assert rung.rung in page
    for answer in record.answers:
        assert answer.key in page
    assert record.environment[0].run_id in page
    # Against itself as the baseline: the compare columns are drawn from the same typed fields.
    assert "no clear change (intervals overlap)" in render_page(record, record)
    # Written back, it is the file it came from: the JSON on disk keeps its shape.
    written = write_record(record, tmp_path)
    assert _same(json.loads(written.read_text()), json.loads(REAL.read_text()))


def _broken(tmp_path: Path, change) -> Path:
    data = json.loads(REAL.read_text())
    change(data)
    path = tmp_path / FILE_NAME
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["rungs"][2].update(mean="small"), "key 'rungs[2].mean': expected a valid number"),
        (lambda d: d["rungs"][0].update(meen=d["rungs"][0].pop("mean")), "key 'rungs[0].meen': no such key (a misspelling?); got float (and 1 more)"),
        (lambda d: d["ab"][1].update(mesage="x"), "key 'ab[1].mesage': no such key"),
        (lambda d: d["answers"][0]["margin"].update(se_units="far"), "key 'answers[0].margin.se_units': expected a valid number"),
        (lambda d: d.update(schema=2), "key 'schema': expected 1"),
        (lambda d: d.pop("session"), "key 'session': missing (a required key)"),
    ],
    ids=["mistyped", "misspelt-missing", "misspelt-extra", "nested", "schema", "missing"],
)
def test_a_bad_record_is_one_line_naming_file_key_and_expectation(tmp_path, change, said):
    path = _broken(tmp_path, change)
    with pytest.raises(RecordError) as err:
        load_record(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and said in line, line


def test_the_writer_rejects_a_key_no_reader_knows():
    record = new_record(argv=["pytest"])
    entry = {"key": "drift-reduced", "question": "q", "passed": True, "message": "m", "baseline_run": "a", "candidate_run": "b", "mode": None}
    with pytest.raises(ValidationError, match="mesage"):
        add_entry(record, "ab", {**entry, "mesage": "m", "test": entries.test_ref("t.py::t", "t")})
    add_entry(record, "ab", {**entry, "test": entries.test_ref("t.py::t", "t")})
    assert record.ab[0].test.name == "t"
    with pytest.raises(ValueError, match="unknown kind 'ruings'"):
        add_entry(record, "ruings", entry)


def test_the_sample_session_record_round_trips(tmp_path):
    record = build_sample_record(tmp_path / "runs")
    folder = write_record(record, tmp_path / "experiment").parent
    again = load_record(folder)
    # As JSON: a margin not measured is NaN, which never equals itself in a dict comparison.
    assert json.dumps(again.to_data(), sort_keys=True) == json.dumps(record.to_data(), sort_keys=True)
    shutil.rmtree(tmp_path / "runs")


def test_an_entry_crosses_from_an_xdist_worker_as_builtin_data():
    # execnet (pytest-xdist's channel) refuses a str subclass: torch's version string inside a readiness
    # entry took a worker down at its session end and lost every entry it held.
    import torch
    from execnet.gateway_base import dumps

    from harness.report.experiment_record import entry_data

    data = entry_data({"bench": {"torch": torch.__version__, "max": float("nan"), "rows": [1, 2]}})
    dumps(data)
    assert type(data["bench"]["torch"]) is str and data["bench"]["rows"] == [1, 2]
