"""vime-mismatch-lab: the train-inference mismatch experiment for VIME, as a library.

Subpackages, one job each: spec (knobs -> resolved spec -> argv), launch (start a trainer),
records (logs and dumps -> run directories), embedded (the miniature VIME), judge (statistics,
verdicts, acceptance checks, ladder classification, the A/B gate), attribution (the token audit and
the seven probes), operators (the selected-logprob operator bench), report (Allure, summary table,
HTML report).
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KNOBS_DIR = REPO_ROOT / "knobs"
DEFAULT_RUNS_DIR = REPO_ROOT / "reports" / "runs"


def repo_relative(path: Path) -> str:
    """A path as a committed record writes it: relative to the repository when inside it (a clone elsewhere
    reads the same record), else as given."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
