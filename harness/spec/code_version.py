"""The version of the code that executes a spec on the embedded backend.

A finished run is reused by its id; on the embedded backend the trainer is this repository's own
code, so its source (harness/embedded) is part of what the run is. Judging code is not: changing
a check re-judges old runs without re-running them.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from harness import REPO_ROOT

EMBEDDED_SOURCES = (REPO_ROOT / "harness" / "embedded", REPO_ROOT / "harness" / "layout")


@lru_cache(maxsize=1)
def embedded_code_version() -> str:
    digest = hashlib.sha256()
    for root in EMBEDDED_SOURCES:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(REPO_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
