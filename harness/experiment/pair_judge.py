"""`python -m harness judge --baseline B --candidate C`: one A/B judged from two runs that already
exist, VIME logs or run directories, without pytest.

    python -m harness judge --baseline baseline.log --candidate candidate.log --out reports/ab

A log (or a directory of logs, events, dumps) is ingested first (harness.records.ingest, into the
runs directory under the id its argument print gives it); a run directory is read as it is. Then,
in order: the A/B contract on what the two runs printed they ran (harness.judge.ab, the candidate's
operator path proven by its own log: harness.judge.vime_execution), the seed's questions (drift,
reward, timings), the performance half (harness.judge.performance), and the seed's summary table
with both rows. OUT/summary.md holds the table, the answers and the performance half; OUT/ab.json
the same as data. Exit status 0 when the contract held and every answer passed, 1 otherwise, 2 when
an input cannot be read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.experiment.evidence import pair_files
from harness.judge import ab
from harness.judge.performance import PerformanceHalf, performance_half
from harness.records.atomic import atomic_write_text
from harness.records.ingest import ingest, is_run_directory, write_run_directory
from harness.records.ingest_identity import check_same_run, ingested_run_id
from harness.records.log_evidence import read_log_evidence
from harness.records.rundir import RunDir
from harness.records.runload import Run
from harness.report.summary import render_csv, render_markdown, summary_row_from_run
from harness.spec import Knobs, SpecError

QUESTIONS = ("drift-reduced", "reward-preserved", "timings")


@dataclass
class PairJudgement:
    baseline: Run
    candidate: Run
    contract: list[str]
    execution: str
    answers: list[ab.Answer] = field(default_factory=list)
    performance: PerformanceHalf | None = None

    @property
    def passed(self) -> bool:
        return not self.contract and all(answer.passed for answer in self.answers)


def load_side(path: Path, runs_dir: Path, label: str) -> Run:
    """A run directory as it is, or a log ingested into `runs_dir` first (its id from what it printed)."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"--{label} {path}: no such file or directory (a VIME log, a directory of logs, or a run directory)")
    if is_run_directory(path):
        return RunDir(path).load()
    result = ingest(path, None)
    if result.problems or not (result.records or result.failures):
        raise SpecError([f"--{label} {path}: {problem}" for problem in result.problems or ["no records"]])
    out = Path(runs_dir) / ingested_run_id(result, path)
    check_same_run(out, path)
    return RunDir(write_run_directory(result, out, {"rung": label})).load()


def judge_pair(baseline: Run, candidate: Run, knobs: Knobs) -> PairJudgement:
    files = pair_files(baseline, candidate, knobs)
    contract = ab.contract_problems(baseline, candidate, knobs, files)
    execution = files.execution.message if files.execution is not None else ""
    answers = [ab.QUESTIONS[q](baseline, candidate, knobs) for q in QUESTIONS]
    half = performance_half(baseline, candidate, read_log_evidence(baseline.path), read_log_evidence(candidate.path), knobs)
    return PairJudgement(baseline, candidate, contract, execution, answers, half)


def _interval(ci) -> str:
    return f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "-"


def _figure(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def render_answers(judgement: PairJudgement) -> str:
    lines = ["## The A/B", ""]
    if judgement.contract:
        lines += ["**Contract: not one workload, or the candidate's path is not proven** (knobs/ab.yaml):", ""]
        lines += [f"- {problem}" for problem in judgement.contract]
    else:
        lines.append("**Contract held**: the two runs printed the same workload apart from the operator path.")
    if judgement.execution:
        lines += ["", f"Candidate execution (from its own log): {judgement.execution}"]
    lines += ["", "| Question | Answer | Why |", "| --- | --- | --- |"]
    lines += [f"| {a.question} | {'pass' if a.passed else 'fail'} | {a.message} |" for a in judgement.answers]
    return "\n".join(lines) + "\n"


def render_performance(half: PerformanceHalf) -> str:
    lines = [
        "## Performance",
        "",
        f"Mean after the {half.warmup}-step warm-up with its {half.confidence:.0%} interval over steps (circular block bootstrap); "
        "the difference is the candidate minus the baseline, paired step by step.",
        "",
        "| Figure | Unit | Baseline | Baseline interval | Candidate | Candidate interval | Difference | Difference interval | Ratio | Source | Note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in half.rows:
        f = row.figure
        lines.append(
            f"| {f.label} | {f.unit} | {_figure(row.baseline.mean)} | {_interval(row.baseline.ci)} | {_figure(row.candidate.mean)} | "
            f"{_interval(row.candidate.ci)} | {_figure(row.difference)} | {_interval(row.difference_ci)} | "
            f"{'-' if row.ratio is None else f'{row.ratio:.3f}x'} | {f.source} | {row.note} |"
        )
    return "\n".join(lines) + "\n"


def write_pair(judgement: PairJudgement, knobs: Knobs, out: Path) -> Path:
    """OUT/summary.md (the seed's table, the A/B, the performance half), summary.csv and ab.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        summary_row_from_run(judgement.baseline, "baseline", knobs=knobs),
        summary_row_from_run(judgement.candidate, "candidate", knobs=knobs, parent=judgement.baseline, notes=judgement.execution),
    ]
    summary = render_markdown(rows) + "\n" + render_answers(judgement) + "\n" + render_performance(judgement.performance)
    atomic_write_text(out / "summary.md", summary)
    atomic_write_text(out / "summary.csv", render_csv(rows))
    data = {
        "baseline": str(judgement.baseline.path),
        "candidate": str(judgement.candidate.path),
        "contract": judgement.contract,
        "execution": judgement.execution,
        "answers": [{"question": a.question, "passed": a.passed, "message": a.message, "evidence": a.evidence} for a in judgement.answers],
        "performance": [row.as_dict() for row in judgement.performance.rows],
        "rows": [row.to_dict() for row in rows],
        "passed": judgement.passed,
    }
    atomic_write_text(out / "ab.json", json.dumps(data, indent=2, default=str, allow_nan=True))
    return out / "summary.md"
