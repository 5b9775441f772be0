"""Runs by resolved spec: `RunSource(knobs, backend, runs_dir)(stage, rung, mode, **overrides)` gives the
loaded run a check needs.

On the embedded and vime backends it launches the run, or reuses a finished one with the same run
id (harness.launch.runner.ensure_run: a file lock per run directory, and the guard that refuses to
replace a directory this tool did not write). With `find_only` (pytest's --backend=records, and
`python -m harness judge`) it launches nothing: it finds the run in runs_dir (find_recorded_run) or
raises RunNotFound saying what is missing. Loaded runs are kept by run id: the rung, its parent and
the A/B gate share one object.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.records.runload import Run
from harness.spec import Knobs, SpecError, backends, resolve, validate
from harness.spec.flag_read import int_flag
from harness.spec.resolve import RunSpec


class RunNotFound(SpecError):
    """A find-only source has no recorded run for a resolved spec."""


def flags_fingerprint(flags: dict) -> str:
    """What a resolved spec runs: a hash of its rendered argv. The run id's hash adds the backend
    and, on the embedded backend, the trainer's code version; a recorded run is matched on this
    part, so a run recorded before a harness-only code change is still found."""
    from harness.spec.render import render_argv

    return hashlib.sha256(json.dumps(render_argv(dict(sorted(flags.items())))).encode()).hexdigest()[:12]


def find_recorded_run(runs_dir: Path, spec: RunSpec) -> tuple[Path | None, str]:
    """A run directory for this resolved spec and how it was matched: by exact run id, else by the
    fingerprint of its full resolved flags, for a run whose spec.yaml records a resolved spec (it
    has a spec_hash). Only a run without one (an ingested log) falls back to its labels (rung, mode, stage),
    and only for a spec without overrides: a label cannot tell an A/A seed or a replay run from
    the baseline itself. The second value says which rule matched, or why nothing did."""
    from harness.records.recorded_spec import recorded_spec
    from harness.records.runload import read_yaml_mapping

    exact = runs_dir / spec.run_id
    if (exact / "spec.yaml").exists():
        return exact, "run id"
    wanted = flags_fingerprint(spec.flags)
    labelled = []
    for spec_file in sorted(runs_dir.glob("*/spec.yaml")):
        mapping, problem = read_yaml_mapping(spec_file)
        if problem:
            continue
        recorded, _ = recorded_spec(mapping, None)
        if recorded.spec_hash:
            if flags_fingerprint(recorded.flags) == wanted:
                return spec_file.parent, "resolved-spec hash (flags)"
        elif recorded.rung == spec.rung and recorded.mode == spec.mode and (recorded.stage or spec.stage) == spec.stage:
            labelled.append(spec_file.parent)
    if labelled and not spec.overrides:
        return labelled[0], "labels (the run records no resolved spec, so its hash cannot be checked)"
    why = f"no run with id {spec.run_id} or resolved-spec hash {wanted} (of its flags)"
    if labelled:
        why += f"; {labelled[0].name} is labelled {spec.rung}/{spec.mode} but records no resolved spec, and labels cannot match a spec with overrides {dict(spec.overrides)}"
    return None, why


@dataclass
class LaunchSettings:
    """How a launching source starts a run (harness.launch.runner.LaunchOptions, less the spec's own)."""

    rerun: bool = False
    vime_root: str | None = None
    ray_address: str | None = None
    image: str | None = None  # the nodes' container image (--image), else the site's
    timeout_s: float | None = None  # None: the stage's budget (knobs/launch.yaml)
    warm_start: bool = True
    session_started: float = 0.0  # runs finished before this were not started by this session
    progress_sink: Callable[[str], None] | None = None
    parallel_runs: int | None = None  # --parallel-runs; None: knobs/launch.yaml (harness.launch.parallel.slots)
    batch_sink: Callable[[str], None] | None = None  # one line as each run of a batch ends (done/total, ETA)


class RunSource:
    """The loaded run of each resolved spec a selection needs, launched or found (module docstring)."""

    def __init__(
        self,
        knobs: Knobs,
        backend: str,
        runs_dir: Path,
        *,
        seed_offset: int = 0,
        find_only: bool = False,
        launch: LaunchSettings | None = None,
    ):
        self.knobs, self.backend, self.runs_dir = knobs, backend, Path(runs_dir).resolve()
        self.seed_offset, self.find_only = int(seed_offset or 0), find_only or not backends.backend(backend).launches
        self.launch = launch or LaunchSettings(session_started=time.time())
        self._loaded: dict[str, Run] = {}

    def spec(self, stage: str, rung: str, mode: str, **overrides) -> RunSpec:
        """The resolved, validated spec; the seed offset added unless a seed is given (a replicate
        of an offset run, seed + i, is already offset). Raises SpecError."""
        if self.seed_offset and "seed" not in overrides:
            base = int_flag(resolve(self.knobs, stage, rung, mode, self.backend, overrides).flags, "seed")
            if base is not None:
                overrides = {**overrides, "seed": int(base) + self.seed_offset}
        return validate(resolve(self.knobs, stage, rung, mode, self.backend, overrides), self.knobs)

    def __call__(self, stage: str, rung: str, mode: str, **overrides) -> Run:
        return self.many([(stage, rung, mode, overrides)])[0]

    def many(self, requests: list[tuple[str, str, str, dict]], cancel=None, on_ready: Callable[[str], None] | None = None) -> list[Run]:
        """The run of each (stage, rung, mode, overrides), in order; those not loaded yet are launched
        side by side (harness.launch.parallel), as many at once as the machine has slots for. Every
        spec is resolved first, so a bad one fails before anything starts. `cancel` (an Event) stops
        the launches when set from another thread; `on_ready(run_id)` is called as each run is on
        disk, finished or not (harness.launch.background waits on it)."""
        ready = on_ready or (lambda run_id: None)
        specs = [self.spec(stage, rung, mode, **overrides) for stage, rung, mode, overrides in requests]
        missing = list({spec.run_id: spec for spec in specs if spec.run_id not in self._loaded}.values())
        if self.find_only:
            for spec in missing:
                self._loaded[spec.run_id] = self._find(spec)
        else:
            from harness.launch.parallel import run_all, slots

            reused = [spec for spec in missing if self._finished_before(spec)]
            for spec in reused:
                self._loaded[spec.run_id] = self._launch(spec)  # found, not launched
                ready(spec.run_id)
            launch = [spec for spec in missing if spec not in reused]
            count, why = slots(self.knobs, self.backend, self.launch.parallel_runs)
            progress = _BatchProgress(launch, count, self.runs_dir, self.launch.batch_sink)
            if len(launch) > 1 and self.launch.batch_sink is not None:
                self.launch.batch_sink(f"[runs] launching {len(launch)} runs, {count} at once ({why})")

            def done(index: int, error: BaseException | None) -> None:
                progress(index, error)
                ready(launch[index].run_id)

            tasks = [lambda stop, spec=spec: self._launch(spec, stop) for spec in launch]
            runs = run_all(tasks, count, on_done=done, cancel=cancel)
            self._loaded.update({spec.run_id: run for spec, run in zip(launch, runs)})
        return [self._loaded[spec.run_id] for spec in specs]

    def fetcher(self, stage: str, mode: str) -> Fetch:
        """rung_id, **overrides -> run, at one stage and mode; `.many` for several at once."""
        return Fetch(self, stage, mode)

    def _find(self, spec: RunSpec) -> Run:
        from harness.records.rundir import RunDir

        path, matched_by = find_recorded_run(self.runs_dir, spec)
        if path is None:
            raise RunNotFound(
                f"no recorded run for rung {spec.rung!r} at {spec.stage} ({spec.mode}{_overrides(spec)}) in {self.runs_dir}: {matched_by}. "
                f"Runs are matched by their full resolved flags; a run that records no flags falls back to its "
                f"spec.yaml labels (make one with `python -m harness ingest LOG --rung {spec.rung} --stage {spec.stage} --mode {spec.mode}`)"
            )
        if matched_by.startswith("labels"):
            warnings.warn(f"recorded runs: {spec.rung} at {spec.stage} ({spec.mode}) matched {path.name} by {matched_by}", stacklevel=2)
        return RunDir(path).load()

    def _finished_before(self, spec: RunSpec) -> bool:
        """A finished run of this spec on disk that this session will reuse (no --rerun)."""
        from harness.records.rundir import RunDir

        return not self.launch.rerun and RunDir(self.runs_dir / spec.run_id).read_status().get("state") == "finished"

    def _launch(self, spec: RunSpec, cancel=None) -> Run:
        from harness.launch.runner import LaunchOptions, ensure_run
        from harness.spec.budget import run_timeout

        settings = self.launch
        timeout, why = (settings.timeout_s, "--run-timeout") if settings.timeout_s is not None else run_timeout(self.knobs, spec)
        options = LaunchOptions(
            runs_dir=self.runs_dir,
            rerun=settings.rerun,
            vime_root=settings.vime_root,
            ray_address=settings.ray_address,
            image=settings.image,
            timeout_s=timeout,
            timeout_why=why,
            progress=False,
            session_started=settings.session_started,
            warm_start=settings.warm_start,
            site=self.knobs.site,
            progress_sink=settings.progress_sink,
            cancel=cancel,
        )
        return ensure_run(spec, options).load()


class _BatchProgress:
    """One line as each run of a batch ends: how many are done, at how many at once, the ETA."""

    def __init__(self, specs: list[RunSpec], slots: int, runs_dir: Path, sink: Callable[[str], None] | None):
        self.specs, self.slots, self.runs_dir, self.sink = specs, slots, runs_dir, sink
        self.started, self.done = time.monotonic(), 0

    def __call__(self, index: int, error: BaseException | None) -> None:
        self.done += 1
        if self.sink is None or len(self.specs) < 2:
            return
        from harness.records.rundir import RunDir

        spec = self.specs[index]
        state = "error: " + str(error).splitlines()[0] if error else (RunDir(self.runs_dir / spec.run_id).read_status().get("state") or "unknown")
        elapsed = time.monotonic() - self.started
        left = len(self.specs) - self.done
        minutes = elapsed / self.done * left / 60
        eta = (f", about {minutes:.0f} min left" if minutes >= 1 else ", under a minute left") if left else f", {elapsed / 60:.1f} min in all"
        self.sink(
            f"[runs] {self.done}/{len(self.specs)} ({self.slots} at once): {spec.rung} at {spec.stage}, {spec.mode}{_overrides(spec)}: {state}{eta}"
        )


@dataclass(frozen=True)
class Fetch:
    """A source's runs at one stage and mode: `fetch(rung_id, **overrides)` for one run,
    `fetch.many([(rung_id, overrides), ...])` for several, launched side by side."""

    source: object  # RunSource, or anything with its `many` (the pytest plugin's RunProvider)
    stage: str
    mode: str

    def __call__(self, rung_id: str, **overrides) -> Run:
        return self.many([(rung_id, overrides)])[0]

    def many(self, requests: list[tuple[str, dict]]) -> list[Run]:
        return self.source.many([(self.stage, rung_id, self.mode, overrides) for rung_id, overrides in requests])

    @property
    def seed_offset(self) -> int:
        """The source's offset on every stage seed (a confirmatory sweep's); 0 where it has none."""
        return int(getattr(self.source, "seed_offset", 0) or 0)


def _overrides(spec: RunSpec) -> str:
    """', seed 2127' and the like: what tells a replicate or a replay run from the rung's own run."""
    return "".join(f", {name} {value}" for name, value in sorted(spec.overrides.items()))
