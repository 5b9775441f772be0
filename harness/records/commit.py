"""This repository's commit, one reader for everyone who records it: the launcher (environment.json
`harness`), the Allure labels and environment.properties. For embedded runs it is the trainer's
code version too."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from harness import REPO_ROOT


@dataclass(frozen=True)
class HarnessCommit:
    commit: str | None  # full hash; None outside a git checkout
    dirty: bool  # tracked files differ from the commit

    @property
    def short(self) -> str:
        return self.commit[:12] if self.commit else "unknown"

    def as_dict(self) -> dict:
        return {"commit": self.commit, "dirty": self.dirty}


def harness_commit() -> HarnessCommit:
    """Read now, not cached: another checkout state between two launches is another record."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return HarnessCommit(git("rev-parse", "HEAD") or None, bool(git("status", "--porcelain", "--untracked-files=no")))
