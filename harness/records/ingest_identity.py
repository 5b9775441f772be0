"""An ingested run's id, from what it ran, and the one error two different logs under it give.

A log that prints its arguments is named by them (`ingested-<hash of the flags that decide what it
computes>`, harness.spec.run_identity): re-ingesting it, or a longer copy of the same log, lands in
the same run directory, and its labels (stage, rung) cannot make two runs one. A log without an
argument print is named by its content. Two different logs under one id are two runs that claim
to be the same one: an error naming both files, never a silent replacement.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.records.ingest import IngestResult, content_hash
from harness.records.printed_arguments import flags_from_arguments
from harness.records.rundir import RunDir
from harness.spec.errors import SpecError
from harness.spec.run_identity import computed_flags


def ingested_run_id(result: IngestResult, path: Path) -> str:
    if result.arguments:
        flags = computed_flags(flags_from_arguments(result.arguments))
        return "ingested-" + hashlib.sha256(json.dumps(flags, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"ingested-{content_hash(path)}"


def check_same_run(out: Path, path: Path) -> None:
    """Refuse to put `path` where another log of the same id was ingested from a different file with
    a different content (the same file again, grown or not, replaces it)."""
    info_path = Path(out) / RunDir.INGEST
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    earlier = info.get("source")
    if not earlier or Path(earlier).resolve() == Path(path).resolve():
        return
    if info.get("content_sha256") in (None, content_hash(Path(path))):
        return
    raise SpecError(
        f"{path}: {Path(out).name} already holds another log of the same run ({earlier}, ingested {info.get('ingested_at', '?')}): "
        f"two different logs under one run id (the same printed arguments); remove {out} or give --out DIR to keep both"
    )
