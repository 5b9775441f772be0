"""Bad input gets one clear line and loses nothing: every case of the corpus through the real CLI.

For each bad input (bad_input_corpus.py), run as a new user would (`.venv/bin/python -m harness ...`):
exit code 2, no traceback, one `error:` line that names the thing, no file that existed before
changed or deleted, and no run marked finished that did not finish.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_corpus import CORPUS, LIVE_TRAINERS, REPO, BadInput

# A line longer than this is not "one clear line" (a 1 KB alias bomb once gave an 8 MB one).
MAX_LINE_CHARS = 600
KINDS = (
    "knob value",
    "knob file",
    "--set value",
    "site file",
    "cli path",
    "cli option",
    "run directory",
    "log",
    "dump",
    "report input",
    "attribution",
)


def harness(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root, by relative path, with a hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def finished_claims(root: Path, before: dict[str, str]) -> list[str]:
    """status.json files written by the command that say finished."""
    claims = []
    for status in root.rglob("status.json"):
        rel = str(status.relative_to(root))
        if before.get(rel) == hashlib.sha256(status.read_bytes()).hexdigest():
            continue  # was there before, unchanged
        try:
            state = json.loads(status.read_text()).get("state")
        except ValueError:
            continue
        if state == "finished":
            claims.append(rel)
    return claims


@pytest.fixture(autouse=True)
def stop_planted_trainers():
    yield
    while LIVE_TRAINERS:
        proc = LIVE_TRAINERS.pop()
        proc.kill()
        proc.wait()


def test_the_corpus_is_large_and_covers_every_kind():
    assert len(CORPUS) >= 60
    assert {case.kind for case in CORPUS} == set(KINDS)
    assert len({case.id for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
def test_bad_input_gets_one_line_and_loses_nothing(case: BadInput, tmp_path: Path):
    args = case.build(tmp_path)
    before = snapshot(tmp_path)
    done = harness(*args)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    if case.verdict:
        lines = [line for line in output.splitlines() if case.names.format(work=tmp_path) in line]
        assert done.returncode != 0, f"exit 0:\n{output[-2000:]}"
        assert len(lines) == 1 and "class: none" not in output, output[-2000:]
        errors = lines
    else:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2, f"exit {done.returncode}:\n{output[-2000:]}"
        assert len(errors) == 1, f"expected one error line, got {len(errors)}:\n{done.stderr[-2000:]}"
        assert case.names.format(work=tmp_path) in errors[0], errors[0]
    assert len(errors[0]) <= MAX_LINE_CHARS, f"{len(errors[0])} chars"
    after = snapshot(tmp_path)
    lost = [rel for rel in before if rel not in after]
    changed = [rel for rel in before if rel in after and after[rel] != before[rel]]
    assert not lost and not changed, f"deleted {lost}, changed {changed}"
    if not case.ended:
        assert not finished_claims(tmp_path, before), "a run that did not finish is recorded as finished"
