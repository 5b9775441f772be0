"""`python -m harness status`: the runs in flight under a runs directory, each with its last rollout
id, its ETA and how to stop it.

A run is in flight when the trainer its launch recorded (trainer.json) still runs: a local process
group, or a Ray job the cluster reports as pending or running, whether or not a harness is still
following it. A Ray job's last rollout comes from the job's own log (read once), because the run
directory stops growing when its follower is interrupted.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness import DEFAULT_RUNS_DIR
from harness.launch.progress import eta_s, format_eta
from harness.spec.flag_read import int_flag


@dataclass(frozen=True)
class InFlight:
    run_id: str
    label: str  # stage/rung (mode)
    how: str  # Ray job ID at ADDRESS (STATUS) | local process group PGID
    last_rollout: int | None
    total: int | None
    eta: float | None
    stop: str

    def line(self) -> str:
        done = "no rollout yet" if self.last_rollout is None else f"last rollout {self.last_rollout} ({self.last_rollout + 1}/{self.total or '?'})"
        return f"{self.run_id}  {self.label}  {self.how}  {done}  {format_eta(self.eta)}  stop: {self.stop}"


def _last_rollout_in(lines) -> int | None:
    from harness.records.logparse import LogParser
    from harness.records.models import Record

    parser, last = LogParser(), None
    for line in lines:
        for item in parser.feed(line.rstrip("\n")):
            if isinstance(item, Record) and item.kind == "rollout":
                last = item.n if last is None else max(last, item.n)
    return last


def _started(run_path: Path) -> float | None:
    try:
        started = json.loads((run_path / "status.json").read_text(encoding="utf-8")).get("started")
        return datetime.fromisoformat(started).timestamp() if started else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def in_flight(runs_dir: Path, ray_address: str | None = None) -> list[InFlight]:
    from harness.launch.ray_job import TERMINAL, client_for, job_started_at, job_status
    from harness.launch.runner import TRAINER_FILE
    from harness.launch.sources import trainer_still_running
    from harness.records.recorded_spec import recorded_spec
    from harness.records.runload import read_metrics, read_yaml_mapping

    found = []
    for trainer_file in sorted(runs_dir.glob(f"*/{TRAINER_FILE}")):
        run_path = trainer_file.parent
        try:
            identity = json.loads(trainer_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(identity, dict):
            continue
        mapping, _ = read_yaml_mapping(run_path / "spec.yaml")
        spec, _ = recorded_spec(mapping, None)
        total = int_flag(spec.flags, "num-rollout")
        label = f"{spec.stage or '?'}/{spec.rung or '?'} ({spec.mode or '?'})"
        if identity.get("ray_job"):
            job, address = identity["ray_job"], ray_address or identity.get("address")
            try:
                client = client_for(address)
                status = job_status(client, job)
            except Exception as err:  # an unreachable cluster is said, not skipped
                found.append(
                    InFlight(
                        run_path.name,
                        label,
                        f"Ray job {job} at {address} (cannot ask: {str(err).splitlines()[0][:80]})",
                        None,
                        total,
                        None,
                        f"ray job stop {job} --address {address}",
                    )
                )
                continue
            if status is None or status in TERMINAL:
                continue
            last = _last_rollout_in(client.get_job_logs(job).splitlines())
            started = job_started_at(client, job) or _started(run_path)
            eta = eta_s(started, last + 1, total) if started and last is not None else None
            found.append(
                InFlight(run_path.name, label, f"Ray job {job} at {address} ({status})", last, total, eta, f"ray job stop {job} --address {address}")
            )
        elif identity.get("pid"):
            alive = trainer_still_running(identity)
            if not alive:
                continue
            records, _ = read_metrics(run_path / "metrics.jsonl")
            rollouts = [r.n for r in records if r.kind == "rollout"]
            last = max(rollouts) if rollouts else None
            started = _started(run_path)
            eta = eta_s(started, last + 1, total) if started and last is not None else None
            pgid = identity.get("pgid", identity["pid"])
            found.append(
                InFlight(run_path.name, label, f"local process group {pgid} on {identity.get('host', '?')}", last, total, eta, f"kill -- -{pgid}")
            )
    return found


def session_counts(runs_dir: Path, since: float) -> tuple[int, int]:
    """(made, running) among the runs under runs_dir started since `since` (a timestamp); reused runs
    are not counted, and a status file not touched since then is not read."""
    from harness.records.rundir import RunDir

    made = running = 0
    for status_file in Path(runs_dir).glob("*/status.json"):
        try:
            if status_file.stat().st_mtime < since:
                continue
        except OSError:
            continue
        status = RunDir(status_file.parent).read_status()
        try:
            started = datetime.fromisoformat(status["started"]).timestamp()
        except (KeyError, TypeError, ValueError):
            continue
        if started < since:
            continue
        if status.get("state") == "running":
            running += 1
        else:
            made += 1
    return made, running


def cmd_status(args: argparse.Namespace) -> int:
    from harness.arguments import existing_dir
    from harness.spec_arguments import site_default, site_from_args

    site = site_from_args(args)
    runs_dir = Path(site_default(args.runs_dir, site, "runs_dir", str(DEFAULT_RUNS_DIR)))
    if not runs_dir.exists():
        print(f"no runs in flight: {runs_dir} does not exist")
        return 0
    existing_dir(runs_dir, "--runs-dir", "a runs directory")
    runs = in_flight(Path(runs_dir), site_default(args.ray_address, site, "ray_address"))
    if not runs:
        print(f"no runs in flight in {runs_dir} ({time.strftime('%H:%M:%S')})")
        return 0
    for run in runs:
        print(run.line())
    print("re-attach to a run: run the pytest or `python -m harness run` command that launched it again")
    return 0


def register(commands) -> None:
    from harness.spec_arguments import add_site_argument

    parser = commands.add_parser("status", help="the runs in flight (local or Ray jobs): last rollout, ETA, how to stop each")
    parser.add_argument("--runs-dir", default=None, help="the runs directory (default: the site's runs-dir, else reports/runs)")
    parser.add_argument("--ray-address", default=None, help="ask this Ray job server instead of the address each run recorded")
    add_site_argument(parser)
    parser.set_defaults(func=cmd_status)
