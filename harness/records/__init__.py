"""Records: VIME's output (log lines, TensorBoard events, debug dumps) -> run directories.

logparse     raw log lines -> records (step/rollout/perf/eval) + failure signatures
rundir       the run directory: atomic writers, streaming appends, status
runload      reading a run directory back (Run), keeping whatever is readable
recorded_spec  a run's spec, typed, from spec.yaml or its argv (Run.spec)
metric_names the VIME metric names the harness reads, spelled once
commit       this repository's commit, as every record names it
debug_dumps  VIME's --save-debug-* dumps -> per-rollout summary records
environment  the environment record (commit, image, hardware, versions, env vars)
ingest       a log / directory / event files / dumps -> records or a run directory
command      `python -m harness ingest`
"""

from harness.records.failures import primary_failure
from harness.records.logparse import LogFileError, LogParser, parse_log_file, parse_log_lines
from harness.records.models import Failure, ParseResult, Record
from harness.records.rundir import RunDir
from harness.records.runload import Run, RunStatus

__all__ = [
    "Failure",
    "LogFileError",
    "LogParser",
    "ParseResult",
    "Record",
    "Run",
    "RunDir",
    "RunStatus",
    "parse_log_file",
    "parse_log_lines",
    "primary_failure",
]
