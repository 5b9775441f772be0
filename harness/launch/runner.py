"""Give a resolved spec a run directory: reuse a finished one, or launch the trainer and record it.

The run id comes from the resolved spec, so a finished run is found again by id; `rerun` starts
over. A file lock per run id makes concurrent pytest-xdist workers wait for one launch instead
of starting two.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from harness.launch.progress import RunProgress
from harness.launch.sources import LocalProcess, RayJob
from harness.launch.trainer import output_flags, trainer_command
from harness.records.environment import collect_environment
from harness.records.failures import primary_failure
from harness.records.logparse import LogParser
from harness.records.models import Failure, Record
from harness.records.rundir import RunDir
from harness.spec import RunSpec, render_argv

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class LaunchOptions:
    runs_dir: Path
    rerun: bool = False
    vime_root: str | None = None
    ray_address: str | None = None
    timeout_s: float = 3600.0
    image: str | None = None
    progress: bool | None = None  # None: only on a terminal
    # With rerun, a run finished after this moment (epoch seconds) was re-run by this same
    # session (another pytest-xdist worker): reuse it rather than run it a third time.
    session_started: float = 0.0
    # Start this program instead of the backend's trainer (same argv appended): a site's wrapper
    # around VIME's train.py, or a test's own small trainer.
    trainer: tuple[str, ...] | None = None


def harness_commit() -> dict:
    """This repository's commit: for embedded runs it is the trainer's code version too."""
    import subprocess

    from harness import REPO_ROOT

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def read_state(run_dir: RunDir) -> str | None:
    status = run_dir.read_status()
    return status.get("state")


def ensure_run(spec: RunSpec, options: LaunchOptions) -> RunDir:
    """The finished (or failed) run for `spec`, launching it unless one exists and rerun is off."""
    trainer_command(spec.backend, options.vime_root)  # a bad --vime-root fails before anything is written
    options.runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(options.runs_dir / spec.run_id)
    with FileLock(str(options.runs_dir / f".{spec.run_id}.lock")):
        if read_state(run_dir) == "finished":
            fresh = run_dir.file(RunDir.STATUS).stat().st_mtime >= options.session_started
            if not options.rerun or fresh:
                return run_dir
        if run_dir.path.exists():
            shutil.rmtree(run_dir.path)
        launch(spec, run_dir.create(), options)
    return run_dir


def launch(spec: RunSpec, run_dir: RunDir, options: LaunchOptions) -> str:
    """Start the trainer, stream its output into the run directory, return the final state."""
    command, cwd = trainer_command(spec.backend, options.vime_root)
    if options.trainer:
        command = list(options.trainer)
    argv = render_argv(spec.flags) + output_flags(run_dir.path, spec.backend)
    run_dir.write_spec(spec.to_dict())
    run_dir.write_argv(command + argv)
    environment = collect_environment(Path(options.vime_root) if options.vime_root else None, options.image)
    environment["harness"] = harness_commit()
    run_dir.write_environment(environment)
    run_dir.set_status("running")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        if options.ray_address:
            source = RayJob(command + argv, cwd, env, options.ray_address)
        else:
            source = LocalProcess(command + argv, cwd, env)
    except Exception:
        run_dir.set_status("failed", failure={"signature": "launch-error", "line": 0, "text": "the trainer could not be started"})
        raise
    run_dir.append_log(f"# launched as {source.description}")
    state = _follow(source, run_dir, spec, options)
    run_dir.close()
    return state


def _follow(source, run_dir: RunDir, spec: RunSpec, options: LaunchOptions) -> str:
    parser = LogParser()
    failures: list[Failure] = []
    deadline = time.monotonic() + options.timeout_s
    total = spec.flags.get("num-rollout") if isinstance(spec.flags.get("num-rollout"), int) else None
    with RunProgress(spec.run_id, total, options.progress) as progress:
        try:
            while True:
                for line in source.poll(POLL_SECONDS):
                    run_dir.append_log(line.rstrip("\n"))
                    for item in parser.feed(line.rstrip("\n")):
                        if isinstance(item, Record):
                            run_dir.append_record(item)
                            progress.update(item.kind, item.n, item.metrics)
                        else:
                            failures.append(item)
                code = source.exit_code()
                if code is not None:
                    break
                if time.monotonic() > deadline:
                    source.stop()
                    run_dir.append_log(f"# stopped by the harness after its {options.timeout_s:.0f} s time limit")
                    run_dir.set_status("interrupted", failure={"signature": "timeout", "line": parser.line_no,
                                                               "text": f"run exceeded --run-timeout {options.timeout_s:.0f}s"})
                    return "interrupted"
        except KeyboardInterrupt:
            source.stop()
            run_dir.append_log("# interrupted (Ctrl-C); the harness stopped the trainer it started")
            run_dir.set_status("interrupted", exit_code=None)
            raise
    parser.finish()
    if code == 0:
        run_dir.set_status("finished", exit_code=0)
        return "finished"
    primary = primary_failure(failures)
    failure = primary.model_dump() if primary else {
        "signature": "nonzero-exit", "line": parser.line_no, "text": f"trainer exited with code {code}"}
    run_dir.set_status("failed", failure=failure, exit_code=code)
    return "failed"
