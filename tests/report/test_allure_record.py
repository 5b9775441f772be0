"""allure_attach and fixtures/report.py in real pytest sessions: what lands in the Allure results,
and that nothing is written (and nothing breaks) without --alluredir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sessions import run_session

RECORDING_TEST = """
import pytest
from runbuilder import CPU_ENVIRONMENT, make_run, noisy, resolved_spec
from harness.records.models import Failure
from harness.report.allure_attach import attach_plot, attach_run, attach_table, label_experiment
from harness.report.plots import abs_diff_figure
from harness.report.summary import summary_row_from_run

@pytest.mark.parametrize("rung", ["near-aligned", "top-p"])
def test_record(tmp_path, record_summary_row, rung, knobs):
    failure = Failure(signature="nccl-error", line=30, text="NCCL error: unhandled system error")
    lines = [f"[2026-11-29 10:00:{i % 60:02d}] train.py:1 - line {i}" for i in range(1, 61)]
    lines[29] = "(MegatronTrainRayActor pid=7) NCCL error: unhandled system error"
    environment = {**CPU_ENVIRONMENT, "links": {"W&B": "https://wandb.ai/team/vime/runs/abc"}}
    run = make_run(tmp_path, f"{rung}-run", resolved_spec("p1", rung), abs_diff=noisy(0.0135, 6, 1),
                   state="failed", failure=failure, log_lines=lines, environment=environment)
    label_experiment("p1", rung, "against parent", "colocate", "embedded", run.id, seed=1234)
    attach_run(run)
    attach_plot(abs_diff_figure(run), "abs-diff per step")
    attach_table([{"a": 1, "b": "x|y"}], "a table")
    record_summary_row(summary_row_from_run(run, rung, knobs=knobs))
"""

NO_ROW_TEST = """
def test_nothing_recorded():
    pass  # a session that records no summary row must write no summary table
"""


def _results(alluredir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(alluredir.glob("*-result.json"))]


def _attachment(alluredir: Path, result: dict, name: str) -> Path:
    matches = [a for a in result["attachments"] if a["name"] == name]
    assert matches, f"no attachment {name!r} in {[a['name'] for a in result['attachments']]}"
    return alluredir / matches[0]["source"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("with-allure")
    done = run_session(workdir, RECORDING_TEST, "--alluredir", str(workdir / "allure-results"))
    assert done.returncode == 0, done.stdout + done.stderr
    return workdir


def test_labels_and_parameters_mirror_the_experiment(recorded):
    results = _results(recorded / "allure-results")
    assert len(results) == 2
    result = next(r for r in results if "top-p" in r["name"])
    labels = {(label["name"], label["value"]) for label in result["labels"]}
    assert {("epic", "p1"), ("feature", "top-p"), ("story", "against parent")} <= labels
    parameters = {p["name"]: p for p in result["parameters"]}
    for name in ("mode", "backend", "run id"):
        assert not parameters[name].get("excluded"), f"{name} defines the result's history"
    for name in ("host", "commit", "seed"):
        assert parameters[name]["excluded"] is True, f"{name} must not split the history"
    assert "top-p-run" in parameters["run id"]["value"]
    links = {link["name"]: link["url"] for link in result["links"]}
    assert links["W&B"] == "https://wandb.ai/team/vime/runs/abc"
    assert links["run directory top-p-run"].startswith("file:///") and links["run directory top-p-run"].endswith("/top-p-run")


def test_run_attachments_hold_the_record(recorded):
    alluredir = recorded / "allure-results"
    result = _results(alluredir)[0]
    spec = _attachment(alluredir, result, "resolved spec (spec.yaml)").read_text()
    assert "rollout-top-p" in spec and "run_id:" in spec
    assert "--rollout-top-p" in _attachment(alluredir, result, "argv").read_text()
    assert json.loads(_attachment(alluredir, result, "environment record").read_text())["links"]
    excerpt = _attachment(alluredir, result, "log excerpt around the failure (nccl-error)").read_text()
    assert "lines 15-45 of 60" in excerpt
    assert ">> 30 | (MegatronTrainRayActor pid=7) NCCL error" in excerpt
    assert _attachment(alluredir, result, "abs-diff per step").read_bytes().startswith(b"\x89PNG")
    table = _attachment(alluredir, result, "a table").read_text()
    assert "| 1 | x\\|y |" in table
    assert _attachment(alluredir, result, "a table (CSV)").read_text() == "a,b\n1,x|y\n"
    rung = "near-aligned" if "near-aligned" in result["name"] else "top-p"
    assert "| Run |" in _attachment(alluredir, result, f"summary row: {rung}").read_text()


def test_session_end_writes_summary_environment_and_global_attachments(recorded):
    alluredir = recorded / "allure-results"
    summary = (recorded / "reports" / "summary.md").read_text()
    assert summary.count("| near-aligned |") == 1 and summary.count("| top-p |") == 1
    assert (recorded / "reports" / "summary.csv").exists()
    properties = dict(line.split("=", 1) for line in (alluredir / "environment.properties").read_text().splitlines())
    assert properties["backend"] == "embedded" and properties["mode"] == "colocate"
    assert {"host", "harness.commit", "python", "torch", "vllm", "megatron-core", "hardware"} <= set(properties)
    globals_ = [json.loads(p.read_text()) for p in alluredir.glob("*-globals.json")]
    names = {a["name"]: a for g in globals_ for a in g.get("attachments", [])}
    assert set(names) == {"Summary table", "Summary table (Markdown)", "summary.csv"}
    assert (alluredir / names["Summary table"]["source"]).read_bytes().startswith(b"\x89PNG")
    assert (alluredir / names["Summary table (Markdown)"]["source"]).read_text() == summary


def test_without_alluredir_everything_is_a_no_op(tmp_path):
    done = run_session(tmp_path, RECORDING_TEST)
    assert done.returncode == 0, done.stdout + done.stderr
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    # The summary table does not depend on Allure; nothing else is written.
    assert written == {"test_inner.py", "reports/summary.md", "reports/summary.csv"}


def test_no_rows_no_summary_but_environment_properties(tmp_path):
    done = run_session(tmp_path, NO_ROW_TEST, "--alluredir", str(tmp_path / "allure-results"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "reports").exists()
    assert (tmp_path / "allure-results" / "environment.properties").exists()
    assert not list((tmp_path / "allure-results").glob("*-globals.json"))


def test_xdist_workers_send_their_rows_to_one_table(tmp_path):
    pytest.importorskip("xdist")
    done = run_session(tmp_path, RECORDING_TEST, "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    table = [line for line in (tmp_path / "reports" / "summary.md").read_text().splitlines() if line.startswith("| ")]
    assert sorted(line.split(" | ")[0] for line in table[1:]) == ["| near-aligned", "| top-p"]
