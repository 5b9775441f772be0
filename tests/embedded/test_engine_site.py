"""The non-colocate server's sitecustomize (harness/embedded/engine_site) does not shadow another.

Python imports only the first sitecustomize on its path, and the server's processes put
engine_site first: a site's own sitecustomize, or tools/avx2_emulation's, must still run there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENGINE_SITE = Path(__file__).resolve().parents[2] / "harness" / "embedded" / "engine_site"


def test_a_sitecustomize_further_along_the_path_still_runs(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    marker = tmp_path / "ran"
    (other / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ENGINE_SITE), str(other)]))
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, cwd=tmp_path, timeout=60)
    assert marker.read_text() == "yes"


def test_the_engine_sites_own_file_runs_once_when_nothing_follows(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ENGINE_SITE))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules if 'sitecustomize' in m))"],
        env=env,
        check=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "['sitecustomize']"
