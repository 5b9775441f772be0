"""The README is a quick start: short, its links and screenshot present, and CI runs exactly the
test command it gives a newcomer."""

from __future__ import annotations

import re
import shlex

from harness import REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_LINES = 120  # a quick start; explanation goes in docs/guide.md, measurements in docs/results.md (generated)


def _text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_a_quick_start():
    lines = _text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; keep it under {MAX_LINES} and move reference to docs/"
    # Timings belong in docs/results.md (generated from committed records), not in the README.
    logged = re.findall(r"\d+ min \d+ s|\b[0-9a-f]{7}\b took", _text())
    assert not logged, f"README.md logs timings ({logged}); commit a record with `python -m harness results --add` instead"


def test_the_readme_names_both_front_ends_of_the_main_job_and_the_results_command():
    text = _text()
    for command in ("make baseline", "python -m harness baseline", "python -m harness results"):
        assert command in text, f"README.md does not mention `{command}`"


def test_every_local_link_and_image_exists():
    targets = re.findall(r"\]\(([^)#\s]+)\)", _text())
    assert any(t.endswith(".png") for t in targets), "README.md shows no screenshot of the experiment page"
    missing = [t for t in targets if "://" not in t and not (REPO_ROOT / t).exists()]
    for target in targets:
        if target.endswith(".png") and (REPO_ROOT / target).exists():
            assert (REPO_ROOT / target).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{target} is not a PNG"
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_ci_runs_the_lint_and_the_readmes_test_command():
    commands = re.findall(r"^    (make \w+)\s+# the tests$", _text(), flags=re.M)
    assert commands == ["make test"], f"README.md should give one test command as `    make ...   # the tests`, found {commands}"
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    steps = [shlex.split(line) for line in ci if line.startswith("make ")]
    assert steps == [["make", "lint"], shlex.split(commands[0])], f".ci/run runs {steps}; it must run `make lint`, then the README's `{commands[0]}`"
