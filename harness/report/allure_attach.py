"""What every experiment test calls to leave its record in Allure.

    label_experiment(stage, rung_or_criterion, check, mode, backend, run_id)
    attach_run(run)              spec, argv, environment, failure excerpt, run-directory and W&B/TB links
    attach_plot(fig, name)       a matplotlib figure as PNG (the figure is closed)
    attach_table(rows, name)     rows (list of dicts) as a Markdown table (rendered inline) and CSV

Labels mirror the experiment (epic = stage, feature = rung or criterion, story = check) and the
parameters that define a result's history are mode, backend and run id; host, commit and seed
are recorded as excluded parameters, as allure-python recommends for values that vary without
changing what is tested. Without --alluredir allure-pytest registers no listener and every
allure call is a no-op; the functions below also skip rendering then (allure_active()).
"""

from __future__ import annotations

import functools
import io
import json
import shlex
import socket
from pathlib import Path

import allure
from allure_commons import plugin_manager

from harness.records.commit import harness_commit
from harness.report.tables import to_csv, to_markdown
from harness.spec.flag_read import text_flag
from harness.spec.render import argv_lines

EXCERPT_CONTEXT_LINES = 15
LOG_TAIL_LINES = 40


def allure_active() -> bool:
    """True when allure-pytest is writing results (pytest ran with --alluredir)."""
    return bool(plugin_manager.hook.attach_data.get_hookimpls())


@functools.lru_cache(maxsize=1)
def session_commit() -> str:
    """The commit every label of this session names (read once: a label per test)."""
    return harness_commit().short


def label_experiment(
    stage: str, rung_or_criterion: str, check: str, mode: str, backend: str, run_id: str, *, seed: int | str | None = None, commit: str | None = None
) -> None:
    if not allure_active():
        return
    allure.dynamic.epic(stage)
    allure.dynamic.feature(rung_or_criterion)
    allure.dynamic.story(check)
    allure.dynamic.parameter("mode", mode)
    allure.dynamic.parameter("backend", backend)
    allure.dynamic.parameter("run id", run_id)
    allure.dynamic.parameter("host", socket.gethostname(), excluded=True)
    allure.dynamic.parameter("commit", commit or session_commit(), excluded=True)
    if seed is not None:
        allure.dynamic.parameter("seed", seed, excluded=True)


def attach_text(text: str, name: str, kind=allure.attachment_type.TEXT) -> None:
    allure.attach(text, name=name, attachment_type=kind)


def argv_text(argv: list[str]) -> str:
    """One flag per line (easy to diff between rungs), then the copy-pasteable command line."""
    lines = argv_lines(argv)
    return "\n".join(lines) + "\n\n# as one command line:\n" + shlex.join(str(a) for a in argv) + "\n"


def _log_lines(log_path: Path) -> list[str]:
    try:
        with log_path.open(encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


def log_excerpt(log_path: Path, line: int, context: int = EXCERPT_CONTEXT_LINES, lines: list[str] | None = None) -> str | None:
    """Lines around `line` (1-based) of the run's log, numbered, the failure line marked '>>'."""
    lines = _log_lines(log_path) if lines is None else lines
    if not lines:
        return None
    line = min(max(line, 1), len(lines))
    first, last = max(1, line - context), min(len(lines), line + context)
    width = len(str(last))
    body = [f"{'>>' if n == line else '  '} {n:>{width}} | {lines[n - 1]}" for n in range(first, last + 1)]
    return f"{log_path} lines {first}-{last} of {len(lines)}\n" + "\n".join(body) + "\n"


def log_tail(log_path: Path, count: int = LOG_TAIL_LINES) -> str | None:
    lines = _log_lines(log_path)
    return log_excerpt(log_path, len(lines), context=count, lines=lines) if lines else None


def tracking_links(run) -> dict[str, str]:
    """W&B / TensorBoard / other links the run's record names: environment.json `links`
    ({name: url}), `wandb.url`, and a TensorBoard directory from the flags."""
    environment = run.environment or {}
    links = {str(k): str(v) for k, v in (environment.get("links") or {}).items() if v}
    wandb = environment.get("wandb")
    if isinstance(wandb, dict) and wandb.get("url"):
        links.setdefault("W&B", str(wandb["url"]))
    flags = run.spec.flags
    for flag in ("tensorboard-dir", "tb-dir", "tensorboard-log-dir"):
        if text_flag(flags, flag):
            path = Path(text_flag(flags, flag))
            links.setdefault("TensorBoard logs", path.as_uri() if path.is_absolute() else str(path))
    return links


def attach_run(run) -> None:
    """The run's record: what was launched, where, on what, and where it failed."""
    if not allure_active():
        return
    if run.spec.flag("seed") is not None:
        allure.dynamic.parameter("seed", run.spec.flag("seed"), excluded=True)
    run_path = Path(run.path).resolve()
    allure.dynamic.link(run_path.as_uri(), name=f"run directory {run.id}")
    for name, url in tracking_links(run).items():
        allure.dynamic.link(url, name=name)
    lines = [f"run directory: {run_path}"]
    lines += [f"{name}: {url}" for name, url in tracking_links(run).items()]
    if run.status is not None:
        lines.append(f"status: {run.status.state}, {run.status.steps_logged} steps logged, exit code {run.status.exit_code}")
    lines += [f"record problem: {problem}" for problem in run.problems]
    attach_text("\n".join(lines) + "\n", "run record")
    if run.spec.recorded:
        attach_text(run.spec.as_yaml(), "resolved spec (spec.yaml)", allure.attachment_type.YAML)
    if run.argv is not None:
        attach_text(argv_text(run.argv), "argv")
    if run.environment is not None:
        attach_text(json.dumps(run.environment, indent=2, default=str), "environment record", allure.attachment_type.JSON)
    log_path = run_path / "log.txt"
    failure = run.status.failure if run.status is not None else None
    if failure is not None:
        excerpt = log_excerpt(log_path, failure.line)
        if excerpt:
            attach_text(
                f"failure: {failure.signature} at line {failure.line}: {failure.text}\n\n{excerpt}",
                f"log excerpt around the failure ({failure.signature})",
            )
    elif run.status is not None and run.status.state in ("failed", "interrupted", "unfinished"):
        tail = log_tail(log_path)
        if tail:
            attach_text(tail, f"log tail (run {run.status.state}, no failure signature found)")


def attach_plot(fig, name: str) -> None:
    """A matplotlib figure as a PNG attachment; the figure is closed either way."""
    import matplotlib.pyplot as plt

    try:
        if allure_active():
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            allure.attach(buffer.getvalue(), name=name, attachment_type=allure.attachment_type.PNG)
    finally:
        plt.close(fig)


MARKDOWN = "text/markdown"  # not in allure's AttachmentType; Allure 3 renders it inline


def attach_table(rows: list[dict], name: str, *, columns: list[str] | None = None, note: str | None = None) -> None:
    """Rows as a Markdown table (rendered inline at full height; harness/report/tables.py says why
    not HTML) and as CSV (full precision, downloadable)."""
    if not allure_active():
        return
    allure.attach(to_markdown(rows, columns, title=name, note=note), name=name, attachment_type=MARKDOWN, extension="md")
    allure.attach(to_csv(rows, columns), name=f"{name} (CSV)", attachment_type=allure.attachment_type.CSV)
