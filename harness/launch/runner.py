"""Give a resolved spec a run directory: reuse a finished one, or launch the trainer and record it.

The run id comes from the resolved spec, so a finished run is found again by id; `rerun` starts
over. A file lock per run id makes concurrent pytest-xdist workers wait for one launch instead
of starting two. On a Ray cluster the job's submission id is the run id too: a run whose job still
runs (or finished while nobody followed it) is attached to, never submitted twice, and stopping
the harness (Ctrl-C, a signal) leaves the job running and says how to stop or re-attach to it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from harness.launch.progress import RunProgress
from harness.launch.ray_job import TERMINAL, RayJob, client_for, default_job_env, jobs_of_run
from harness.launch.sources import LocalProcess, trainer_still_running
from harness.records.atomic import atomic_write_json
from harness.records.commit import harness_commit
from harness.records.environment import checkpoint_record, collect_environment
from harness.records.failures import primary_failure
from harness.records.logparse import LogParser
from harness.records.models import Failure, Record
from harness.records.rundir import RunDir, written_by_harness
from harness.spec import RunSpec, SpecError, backends, render_argv
from harness.spec.flag_read import int_flag, text_flag

POLL_SECONDS = 0.5
# In the run directory: the trainer's pid and start time (or Ray job id), so that a later launch
# of the same spec can tell whether it still runs before deleting the directory it writes to.
TRAINER_FILE = "trainer.json"


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
    # session (another pytest-xdist worker): reuse it rather than run it a third time. By default
    # the session starts when its options are made (a default of 0 counted every finished run as
    # this session's, so `python -m harness run --rerun` never relaunched anything).
    session_started: float = field(default_factory=time.time)
    # Start this program instead of the backend's trainer (same argv appended): a site's wrapper
    # around VIME's train.py, or a test's own small trainer.
    trainer: tuple[str, ...] | None = None
    # Embedded backend only: fork each trainer from one pre-imported interpreter (harness.launch.warm)
    # instead of starting a fresh one; a session of many runs then pays the imports once.
    warm_start: bool = False
    # The cluster's site file (harness.spec.site.Site): the job's working directory and environment.
    site: object | None = None
    # Where the time limit came from, for the log line that reports it.
    timeout_why: str = ""
    # A callable taking one progress line (rollout i/N, ETA), for a front end that owns the terminal.
    progress_sink: object | None = None
    # Set (a threading.Event) when the launch that started this run beside others is stopped: the
    # run then stops as on Ctrl-C, keeping what it logged (harness.launch.parallel).
    cancel: object | None = None


# Ray jobs this process stopped following while they still ran (Ctrl-C, a signal): job id ->
# what to type to stop it; a front end (the pytest plugin) lists them when its session ends.
DETACHED: dict[str, str] = {}


def read_state(run_dir: RunDir) -> str | None:
    status = run_dir.read_status()
    return status.get("state")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the harness is (as Python raises KeyboardInterrupt for
    SIGINT), so the launch stops its trainer and records the run before the process ends. A
    KeyboardInterrupt, so whatever handles Ctrl-C (pytest ends its session) handles it alike."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Cancelled(KeyboardInterrupt):
    """The launch this run was started beside others by was stopped (Ctrl-C, a signal reached its
    main thread): this run stops too, and keeps what it logged (harness.launch.parallel)."""

    def __init__(self, why: str = "stopped with the runs launched beside it"):
        super().__init__(why)


@contextmanager
def signals_raise():
    """While a trainer runs: SIGTERM/SIGHUP raise Terminated, and the first signal of any kind
    makes later ones wait, so the cleanup that stops the trainer is not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a worker thread's caller handles signals
        return
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {signum: signal.getsignal(signum) for signum in handled}

    def on_signal(signum, frame):
        for other in handled:
            signal.signal(other, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    for signum in handled:
        signal.signal(signum, on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _refuse_to_replace(run_dir: RunDir) -> None:
    """A run directory is deleted and launched again only when it is ours and nothing writes to it."""
    path = run_dir.path
    if not path.exists():
        return
    if not path.is_dir() or (any(path.iterdir()) and not written_by_harness(path)):
        raise SpecError(
            f"{path}: exists and is not a run directory written by this tool; refusing to replace it "
            f"(its files would be deleted): move it away or choose another --runs-dir"
        )
    try:
        identity = json.loads(run_dir.file(TRAINER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    alive = trainer_still_running(identity) if isinstance(identity, dict) else None
    if alive:
        raise SpecError(f"{path}: an earlier launch of this spec is not over, {alive}; refusing to delete the directory it still writes to")


def ensure_run(spec: RunSpec, options: LaunchOptions) -> RunDir:
    """The finished (or failed) run for `spec`, launching it unless one exists and rerun is off."""
    from harness.spec.site import launch_problems

    placeholders = launch_problems(spec, getattr(options.site, "source", None))
    if placeholders:
        raise SpecError(placeholders)
    _command(spec, options)  # a bad --vime-root fails before anything is written
    options.runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(options.runs_dir / spec.run_id)
    with FileLock(str(options.runs_dir / f".{spec.run_id}.lock")):
        state = read_state(run_dir)
        if state == "finished":
            fresh = run_dir.file(RunDir.STATUS).stat().st_mtime >= options.session_started
            if not options.rerun or fresh:
                return run_dir
        if options.ray_address:
            job_id = _job_to_attach(spec.run_id, options, recorded_finished=state == "finished")
            if job_id is not None:
                attach(spec, run_dir.create(), job_id, options)
                return run_dir
        _refuse_to_replace(run_dir)
        if run_dir.path.exists():
            shutil.rmtree(run_dir.path)
        launch(spec, run_dir.create(), options)
    return run_dir


def _job_to_attach(run_id: str, options: LaunchOptions, recorded_finished: bool) -> str | None:
    """The Ray job of this run to follow instead of submitting one: the latest, if it still runs,
    or if it succeeded while nobody followed it (its records are rebuilt from its log)."""
    jobs = jobs_of_run(client_for(options.ray_address), run_id)
    if not jobs:
        return None
    job_id, status = jobs[-1]
    if status not in TERMINAL:
        return job_id
    if status == "SUCCEEDED" and not recorded_finished and not options.rerun:
        return job_id
    return None


def _command(spec: RunSpec, options: LaunchOptions) -> tuple[list[str], Path]:
    """The trainer's command and the directory it starts in. A Ray job starts in the site's working
    directory on the cluster (else its VIME root, else this machine's), which need not exist here."""
    site = options.site
    on_cluster = bool(options.ray_address)
    vime_root = options.vime_root or getattr(site, "vime_root", None)
    backend = backends.backend(spec.backend)
    command, cwd = backend.trainer_command(vime_root, on_cluster=on_cluster)
    if options.trainer:
        command = list(options.trainer)
    if on_cluster and getattr(site, "working_dir", None):
        if not backend.trainer_in_repo and not options.trainer:
            command = [*command[:-1], str(cwd / command[-1])]  # the trainer's script stays its checkout's, wherever the job starts
        cwd = Path(site.working_dir)
    return command, cwd


def _job_env(options: LaunchOptions) -> dict[str, str]:
    """What a Ray job receives: the site's forwarded and set variables, else the trainers' prefixes."""
    if options.site is not None:
        env = options.site.job_env(dict(os.environ))
    else:
        env = default_job_env(dict(os.environ))
    return {**env, "PYTHONUNBUFFERED": "1"}


def launch(spec: RunSpec, run_dir: RunDir, options: LaunchOptions) -> str:
    """Start the trainer, stream its output into the run directory, return the final state.
    A signal (SIGTERM, SIGHUP, Ctrl-C) stops a local trainer this call started and marks the run
    interrupted with every step it logged (a Ray job is left running: `_record_interrupt`); the
    exception then goes on to the caller."""
    command, cwd = _command(spec, options)
    argv = render_argv(spec.flags) + backends.backend(spec.backend).output_flags(run_dir.path, spec.flags)
    source = None
    with signals_raise():
        try:
            run_dir.write_spec(spec.to_dict())
            run_dir.write_argv(command + argv)  # written redacted; the trainer gets the values
            vime_root = options.vime_root or getattr(options.site, "vime_root", None)  # its commit, where this machine sees it
            image = options.image or getattr(options.site, "image", None)
            environment = collect_environment(Path(vime_root) if vime_root and Path(vime_root).is_dir() else None, image)
            environment["harness"] = harness_commit().as_dict()
            if backends.backend(spec.backend).on_cluster:  # the rollout checkpoint's own config.json: its precision, not its name's
                environment["checkpoint"] = checkpoint_record(text_flag(spec.flags, "hf-checkpoint"))
            if options.ray_address:  # where the job runs, and which variables it was given (names: values may be secrets)
                environment["ray_job"] = {"address": options.ray_address, "working_dir": str(cwd), "env": sorted(_job_env(options))}
            run_dir.write_environment(environment)
            run_dir.set_status("running")
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            try:
                if options.ray_address:
                    job_env = {**_job_env(options), **({"LAB_CONTAINER_IMAGE": image} if image else {})}
                    source = RayJob.submit(command + argv, cwd, job_env, options.ray_address, spec.run_id)
                else:
                    source = _local_source(command + argv, cwd, env, spec, options, run_dir)
            except Exception:
                run_dir.set_status("failed", failure={"signature": "launch-error", "line": 0, "text": "the trainer could not be started"})
                raise
            atomic_write_json(run_dir.file(TRAINER_FILE), source.identity())
            run_dir.append_log(f"# launched as {source.description}")
            return _follow(source, run_dir, spec, options)
        except KeyboardInterrupt as stop:
            _record_interrupt(run_dir, source, str(stop) if isinstance(stop, (Terminated, Cancelled)) else "Ctrl-C")
            raise
        finally:
            run_dir.close()


def attach(spec: RunSpec, run_dir: RunDir, job_id: str, options: LaunchOptions) -> str:
    """Follow a Ray job submitted earlier for this run: its whole log is read again from the start
    (Ray keeps it), so log.txt and metrics.jsonl are rebuilt rather than continued."""
    source = None
    with signals_raise():
        try:
            for name in (RunDir.LOG, RunDir.METRICS):
                run_dir.file(name).unlink(missing_ok=True)
            if not run_dir.file(RunDir.SPEC).exists():  # attached from a runs directory the launch did not write
                run_dir.write_spec(spec.to_dict())
                command, _ = _command(spec, options)
                run_dir.write_argv(command + render_argv(spec.flags) + backends.backend(spec.backend).output_flags(run_dir.path, spec.flags))
            run_dir.set_status("running")
            source = RayJob.attach(options.ray_address, job_id)
            atomic_write_json(run_dir.file(TRAINER_FILE), source.identity())
            run_dir.append_log(f"# attached to {source.description}")
            return _follow(source, run_dir, spec, options)
        except KeyboardInterrupt as stop:
            _record_interrupt(run_dir, source, str(stop) if isinstance(stop, (Terminated, Cancelled)) else "Ctrl-C")
            raise
        finally:
            run_dir.close()


def _local_source(command: list[str], cwd: Path, env: dict[str, str], spec: RunSpec, options: LaunchOptions, run_dir: RunDir):
    """The trainer as a local process: forked warm when the options ask for it and it is available,
    otherwise started cold (the log says why)."""
    if options.warm_start and backends.backend(spec.backend).trainer_in_repo and not options.trainer:
        from harness.launch.warm import WarmProcess, WarmStartUnavailable

        try:
            return WarmProcess(command, cwd, env)
        except WarmStartUnavailable as why:
            run_dir.append_log(f"# warm start unavailable ({why}); starting the trainer in a fresh interpreter")
    return LocalProcess(command, cwd, env)


def _record_interrupt(run_dir: RunDir, source, why: str) -> None:
    if isinstance(source, RayJob) and source.exit_code() is None:
        # The job belongs to the cluster, not to this process: it keeps running, and the same
        # command run again attaches to it.
        hint = f"re-attach by running the same command again; stop it with `{source.stop_hint()}`"
        DETACHED[source.job_id] = hint
        note = f"{why}: the harness stopped following {source.description}, which still runs: {hint}"
        run_dir.append_log(f"# detached ({note})")
        run_dir.set_status("interrupted", note=note)
        import sys

        print(f"{run_dir.id}: {note}", file=sys.stderr)
        return
    if source is not None:
        source.stop()
    steps = run_dir.set_status("interrupted")["steps_logged"]  # counts the steps on disk first
    note = (
        f"{why}: the harness stopped the trainer it started; {steps} steps logged are kept"
        if source is not None
        else f"{why} before the trainer started"
    )
    run_dir.append_log(f"# interrupted ({note})")
    run_dir.set_status("interrupted", note=note)


def _record_tracking(run_dir: RunDir, spec: RunSpec, parser: LogParser) -> None:
    """The run's W&B run (path, URL, directory, from W&B's own lines in the log) and TensorBoard
    directory, into its environment record (harness.records.environment.tracking_record)."""
    from harness.records.environment import tracking_record

    run_dir.record_tracking(tracking_record(spec.flags, parser.result.tracking, run_dir.path))
    run_dir.record_nodes(parser.result.provenance, "described by each node inside the Ray job (harness.launch.node_probe)")


def _completion(parser: LogParser, spec: RunSpec):
    from harness.records.completion import Length, completion, length_from_arguments

    result = parser.result
    length = length_from_arguments(result.arguments, result.argument_lines)
    if length is None:
        length = Length(int_flag(spec.flags, "num-rollout"), "the spec's num-rollout")
    return completion(result.records, length)


def _follow(source, run_dir: RunDir, spec: RunSpec, options: LaunchOptions) -> str:
    parser = LogParser()
    failures: list[Failure] = []
    refusal = None  # the trainer's last "error: ..." line (bad input is one such line), for the failure text
    # An attached job has been running since it started, not since we began to follow it.
    started = getattr(source, "started_at", None) or time.time()
    deadline = started + options.timeout_s
    run_dir.append_log(f"# time limit {options.timeout_s:.0f} s" + (f" ({options.timeout_why})" if options.timeout_why else ""))
    total = int_flag(spec.flags, "num-rollout")
    with RunProgress(spec.run_id, total, options.progress, started=started, sink=options.progress_sink) as progress:
        while True:
            for line in source.poll(POLL_SECONDS):
                run_dir.append_log(line.rstrip("\n"))
                if line.startswith("error:"):
                    refusal = (parser.line_no + 1, line.rstrip("\n"))
                for item in parser.feed(line.rstrip("\n")):
                    if isinstance(item, Record):
                        run_dir.append_record(item)
                        progress.update(item.kind, item.n, item.metrics)
                    else:
                        failures.append(item)
            code = source.exit_code()
            if code is not None:
                break
            if options.cancel is not None and options.cancel.is_set():
                raise Cancelled()
            if time.time() > deadline:
                _record_tracking(run_dir, spec, parser)
                source.stop()
                run_dir.append_log(f"# stopped by the harness after its {options.timeout_s:.0f} s time limit")
                run_dir.set_status(
                    "interrupted",
                    failure={
                        "signature": "timeout",
                        "line": parser.line_no,
                        "text": f"run exceeded the harness's time limit of {options.timeout_s:.0f} s",
                    },
                )
                return "interrupted"
    parser.finish()
    _record_tracking(run_dir, spec, parser)
    if code == 0:
        # A clean exit is not the end of a run: its records must cover every rollout it was launched
        # with (the log's own argument print, else the spec's num-rollout). VIME prints no end line.
        done = _completion(parser, spec)
        if not done.complete:
            run_dir.append_log(f"# exited 0 but {done.note}")
            run_dir.set_status("unfinished", exit_code=0, note=done.note)
            return "unfinished"
        run_dir.set_status("finished", exit_code=0)
        return "finished"
    primary = primary_failure(failures)
    if primary:
        failure = primary.model_dump()
    elif refusal:
        failure = {"signature": "nonzero-exit", "line": refusal[0], "text": f"trainer exited with code {code}: {refusal[1]}"}
    else:
        failure = {"signature": "nonzero-exit", "line": parser.line_no, "text": f"trainer exited with code {code}"}
    run_dir.set_status("failed", failure=failure, exit_code=code)
    return "failed"
