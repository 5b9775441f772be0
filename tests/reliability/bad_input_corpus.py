"""A corpus of bad inputs, built on the spot: each writes what it needs under a work directory
and returns the `python -m harness` arguments that feed it to the real CLI.

Every case names the fragment the one error line must contain. The kinds follow
docs/reliability.md: knob values, knob files, --set values, command-line paths and options,
run directories, VIME logs, debug dumps and attribution inputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KNOBS = REPO / "knobs"
SPEC = ["--stage", "p1", "--rung", "top-p"]


@dataclass(frozen=True)
class BadInput:
    id: str
    kind: str
    build: Callable[[Path], list[str]]  # work dir -> CLI arguments
    names: str  # the error line contains this; "{work}" stands for the work directory
    ended: bool = False  # the input shows the run ended (its end line): a finished record is true
    # A command that answers with a verdict rather than an input error (`attribute` that could
    # check nothing): a non-zero exit and one line naming it, on stdout or stderr.
    verdict: bool = False


# --- helpers that build inputs -----------------------------------------------------------------


def knobs_copy(work: Path) -> Path:
    target = work / "knobs"
    if not target.exists():
        shutil.copytree(KNOBS, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: the corpus expects {old!r} in it (knobs changed?)"
    path.write_text(text.replace(old, new, 1))


def base_flag(line: str) -> Callable[[Path], list[str]]:
    """base.yaml's `num-rollout: 100` replaced by `line` (another flag value)."""

    def build(work: Path) -> list[str]:
        knobs = knobs_copy(work)
        edit(knobs / "base.yaml", "  num-rollout: 100\n", f"  num-rollout: 100\n  {line}\n")
        return ["argv", *SPEC, "--knobs", str(knobs)]

    return build


def base_value(flag: str, value: str) -> Callable[[Path], list[str]]:
    def build(work: Path) -> list[str]:
        knobs = knobs_copy(work)
        text = (knobs / "base.yaml").read_text()
        start = text.index(f"\n  {flag}: ") + 1
        end = text.index("\n", start)
        (knobs / "base.yaml").write_text(text[:start] + f"  {flag}: {value}" + text[end:])
        return ["argv", *SPEC, "--knobs", str(knobs)]

    return build


def rung_change(line: str) -> Callable[[Path], list[str]]:
    """ladder/top-p.yaml gets one more flag under changes.flags."""

    def build(work: Path) -> list[str]:
        knobs = knobs_copy(work)
        edit(knobs / "ladder" / "top-p.yaml", "    rollout-top-p: 0.95\n", f"    rollout-top-p: 0.95\n    {line}\n")
        return ["argv", *SPEC, "--knobs", str(knobs)]

    return build


def rung_file(content: bytes) -> Callable[[Path], list[str]]:
    def build(work: Path) -> list[str]:
        knobs = knobs_copy(work)
        (knobs / "ladder" / "top-p.yaml").write_bytes(content)
        return ["argv", *SPEC, "--knobs", str(knobs)]

    return build


def rung_prefix(text: str) -> Callable[[Path], list[str]]:
    """Lines put in front of ladder/top-p.yaml (top-level keys)."""

    def build(work: Path) -> list[str]:
        knobs = knobs_copy(work)
        path = knobs / "ladder" / "top-p.yaml"
        path.write_text(text + path.read_text())
        return ["argv", *SPEC, "--knobs", str(knobs)]

    return build


def rung_is_a_directory(work: Path) -> list[str]:
    knobs = knobs_copy(work)
    (knobs / "ladder" / "zz-dir.yaml").mkdir()
    return ["argv", *SPEC, "--knobs", str(knobs)]


def alias_bomb(levels: int = 9) -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]")
    return ("\n".join(lines) + "\n").encode()


def with_set(*pairs: str) -> Callable[[Path], list[str]]:
    def build(work: Path) -> list[str]:
        args = ["argv", *SPEC]
        for pair in pairs:
            args += ["--set", pair]
        return args

    return build


def a_file(work: Path, name: str = "a-file") -> Path:
    path = work / name
    path.write_text("user's file\n")
    return path


def cli(*args) -> Callable[[Path], list[str]]:
    """Arguments in which "{file}" is a regular file and "{work}" the work directory."""

    def build(work: Path) -> list[str]:
        file = a_file(work)
        return [str(a).replace("{file}", str(file)).replace("{work}", str(work)) for a in args]

    return build


def with_site(text: str, *args: str) -> Callable[[Path], list[str]]:
    """A site file holding `text`, passed with --site to `args` (default: argv of SPEC)."""

    def build(work: Path) -> list[str]:
        site = work / "site.yaml"
        site.write_text(text)
        return [*(args or ("argv", *SPEC)), "--site", str(site)]

    return build


# The site that fills every placeholder of a near-aligned launch on VIME but its BF16 checkpoint.
SITE_MISSING_CHECKPOINT = "paths:\n  /path/to/Qwen3-30B-A3B_torch_dist: /data/ref\n  /path/to/dapo-math-17k: /data/dapo\n"


def users_directory(work: Path) -> Path:
    user = work / "results"
    user.mkdir()
    (user / "notes.md").write_text("three weeks of notes\n")
    (user / "data.csv").write_text("a,b\n1,2\n")
    return user


def ingest_out_users_dir(work: Path) -> list[str]:
    return ["ingest", str(REPO / "tests" / "data" / "vime_logs" / "colocate_3_rollouts.log"), "--out", str(users_directory(work))]


def unreadable_results(work: Path) -> list[str]:
    """An Allure results folder whose result files are all unreadable: torn, not JSON, no status."""
    results = work / "results"
    results.mkdir()
    (results / "a-result.json").write_text('{"name": "test_x", "sta')
    (results / "b-result.json").write_bytes(b"\x00\x01 not json")
    (results / "c-result.json").write_text('["name", "status"]')
    return ["report", "--results", str(results), "--out", str(work / "report")]


def report_over_users_dir(work: Path) -> list[str]:
    """A readable results folder, and --out naming a folder of the user's."""
    results = work / "allure-results"
    results.mkdir()
    (results / "a-result.json").write_text(json.dumps({"name": "test_x", "status": "passed", "uuid": "a"}))
    return ["report", "--results", str(results), "--out", str(users_directory(work))]


def run_id(*set_pairs: str) -> str:
    """The run id `harness run --stage p0 --rung fp8-plus-filters` gets (asked of the harness)."""
    code = (
        "import sys; from harness.cli import main, spec_from_args, build_parser\n"
        "args = build_parser().parse_args(sys.argv[1:]); print(spec_from_args(args)[1].run_id)"
    )
    args = ["run", "--stage", "p0", "--rung", "fp8-plus-filters"] + [x for p in set_pairs for x in ("--set", p)]
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def run_over_users_dir(work: Path) -> list[str]:
    runs = work / "runs"
    runs.mkdir()
    user = runs / run_id("num-rollout=2")
    user.mkdir()
    (user / "notes.md").write_text("not a run directory\n")
    return ["run", "--stage", "p0", "--rung", "fp8-plus-filters", "--set", "num-rollout=2", "--runs-dir", str(runs)]


LIVE_TRAINERS: list[subprocess.Popen] = []  # stopped by the test module after each case


def live_run_dir(path: Path) -> Path:
    """A run directory (state running) whose trainer, a process of this test, still runs."""
    path.mkdir(parents=True)
    (path / "log.txt").write_text("step 0: {'train/loss': 0.1}\n")
    (path / "status.json").write_text(json.dumps({"state": "running", "started": "2026-12-01T00:00:00+00:00"}))
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    LIVE_TRAINERS.append(trainer)
    stat = Path(f"/proc/{trainer.pid}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    (path / "trainer.json").write_text(json.dumps({"pid": trainer.pid, "pgid": trainer.pid, "start_ticks": ticks}))
    return path


def run_while_earlier_trainer_alive(work: Path) -> list[str]:
    live_run_dir(work / "runs" / run_id("num-rollout=2"))
    return ["run", "--stage", "p0", "--rung", "fp8-plus-filters", "--set", "num-rollout=2", "--runs-dir", str(work / "runs")]


def ingest_out_onto_live_run(work: Path) -> list[str]:
    live = live_run_dir(work / "runs" / "embedded-colocate-0123456789ab")
    return ["ingest", str(REPO / "tests" / "data" / "vime_logs" / "colocate_3_rollouts.log"), "--out", str(live)]


# --- logs ----------------------------------------------------------------------------------------

STEP = "[2026-11-20 10:00:0{n}] model.py:540 - step {n}: {{'train/loss': 0.0{n}, 'train/train_rollout_logprob_abs_diff': 0.01{n}}}"
END = "[2026-11-20 10:00:09] train.py:98 - training finished"


# Megatron's argument print, as VIME's driver logs it at start (the run's length is read from it).
ARGUMENTS_PRINT = (
    "[2026-11-20 10:00:00] arguments.py:10 - ------------------------ arguments ------------------------",
    "[2026-11-20 10:00:00] arguments.py:10 -   num_rollout ..................................... 3",
    "[2026-11-20 10:00:00] arguments.py:10 - -------------------- end of arguments ---------------------",
)


def log_case(*lines: str, binary: bytes | None = None, extra: list[str] | None = None) -> Callable[[Path], list[str]]:
    def build(work: Path) -> list[str]:
        log = work / "vime.log"
        if binary is not None:
            log.write_bytes(binary)
        else:
            log.write_text("\n".join(lines) + "\n")
        return ["ingest", str(log), "--out", str(work / "ingested"), *(extra or [])]

    return build


def run_dir_case(status: str | None, files: dict | None = None) -> Callable[[Path], list[str]]:
    """A launched run directory with this status.json text (None: no status.json)."""

    def build(work: Path) -> list[str]:
        run = work / "runs" / "embedded-colocate-0123456789ab"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"kind": "step", "n": n, "metrics": {"train/loss": 0.1}}) + "\n" for n in range(3)))
        (run / "spec.yaml").write_text("run_id: embedded-colocate-0123456789ab\nflags: {num-rollout: 30}\n")
        (run / "argv.json").write_text("[]\n")
        (run / "environment.json").write_text("{}\n")
        if status is not None:
            (run / "status.json").write_text(status)
        for name, text in (files or {}).items():
            (run / name).write_text(text)
        return ["ingest", str(run), "--out", str(work / "copy")]

    return build


# --- dumps ---------------------------------------------------------------------------------------


def dump_case(
    payload: Callable[[], object], name: str = "rollout_0.pt", extra: Callable[[], dict] | None = None, command: str = "ingest"
) -> Callable[[Path], list[str]]:
    def build(work: Path) -> list[str]:
        import torch

        dumps = work / "run" / "dumps"
        dumps.mkdir(parents=True)
        torch.save(payload(), dumps / name)
        for other, data in (extra() if extra else {}).items():
            torch.save(data, dumps / other)
        if command == "attribute":
            (work / "run" / "status.json").write_text(json.dumps({"state": "finished"}))
            return ["attribute", str(work / "run")]
        return ["ingest", str(dumps), "--out", str(work / "ingested")]

    return build


def samples(n: int, length: int = 4) -> list[dict]:
    return [
        {"tokens": list(range(length)), "response_length": 2, "reward": 1.0, "loss_mask": [1] * length, "rollout_log_probs": [-0.5] * length}
        for _ in range(n)
    ]


def train_dump(train: int, rollout: int, masks: int | None = None) -> dict:
    return {
        "rollout_id": 0,
        "rank": 0,
        "rollout_data": {
            "log_probs": [[-0.5, -0.4]] * train,
            "rollout_log_probs": [[-0.5, -0.45]] * rollout,
            "loss_masks": [[1, 1]] * (masks if masks is not None else train),
            "tokens": [[1, 2]] * train,
        },
    }


class Planted:
    """An object whose unpickling would run a command: weights_only loading must refuse it."""

    def __reduce__(self):
        return (os.system, ("echo planted",))


# --- the corpus ----------------------------------------------------------------------------------

INT64_PLUS = "9223372036854775808"

CORPUS: list[BadInput] = [
    # knob values (one line: file, key, value, rule)
    BadInput("knob-count-as-word", "knob value", base_value("num-rollout", "three"), "base.yaml: flags.num-rollout: expected a whole number >= 1"),
    BadInput("knob-count-inf", "knob value", base_value("rollout-batch-size", "1.0e+400"), "flags.rollout-batch-size: expected a finite number"),
    BadInput(
        "knob-count-beyond-int64", "knob value", base_value("global-batch-size", INT64_PLUS), "flags.global-batch-size: expected a value within int64"
    ),
    BadInput("knob-negative-rollouts", "knob value", base_value("num-rollout", "-5"), "flags.num-rollout: expected a whole number >= 1"),
    BadInput("knob-negative-batch", "knob value", base_value("rollout-batch-size", "-32"), "flags.rollout-batch-size: expected a whole number >= 1"),
    BadInput(
        "knob-zero-samples-per-prompt",
        "knob value",
        rung_change("n-samples-per-prompt: 0"),
        "top-p.yaml: changes.flags.n-samples-per-prompt: expected a whole number >= 1",
    ),
    BadInput("knob-float-count", "knob value", rung_change("num-rollout: 2.5"), "changes.flags.num-rollout: expected a whole number >= 1"),
    BadInput("knob-bool-count", "knob value", rung_change("global-batch-size: true"), "changes.flags.global-batch-size: expected a number"),
    BadInput(
        "knob-zero-tp",
        "knob value",
        rung_change("tensor-model-parallel-size: 0"),
        "changes.flags.tensor-model-parallel-size: expected a whole number >= 1",
    ),
    BadInput(
        "knob-temperature-inf", "knob value", rung_change("rollout-temperature: .inf"), "changes.flags.rollout-temperature: expected a finite number"
    ),
    BadInput("knob-top-p-nan", "knob value", rung_change("rollout-top-k: .nan"), "changes.flags.rollout-top-k: expected a finite number"),
    BadInput("knob-seed-beyond-int64", "knob value", base_flag(f"seed: -{INT64_PLUS}1"), "flags.seed: expected a value within int64"),
    BadInput(
        "knob-memory-share-above-1",
        "knob value",
        base_value("vllm-gpu-memory-utilization", "1.5"),
        "flags.vllm-gpu-memory-utilization: expected a number in [0, 1]",
    ),
    BadInput("knob-negative-seed", "knob value", base_flag("seed: -1"), "flags.seed: expected a whole number >= 0"),
    # knob files (YAML itself)
    BadInput("knob-duplicate-top-level-key", "knob file", rung_prefix("title: first title\n"), "top-p.yaml: line "),
    BadInput("knob-duplicate-flag", "knob file", rung_change("rollout-top-p: 0.5"), "key 'rollout-top-p' given twice"),
    BadInput("knob-duplicate-in-base", "knob file", base_flag("num-rollout: 7"), "key 'num-rollout' given twice"),
    BadInput("knob-alias-bomb", "knob file", rung_file(alias_bomb()), "aliases expand this document past"),
    BadInput("knob-recursive-alias", "knob file", rung_prefix("loop: &loop [*loop]\n"), "recursive alias"),
    BadInput(
        "knob-binary-rung",
        "knob file",
        rung_file(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
        "top-p.yaml: expected YAML text, got binary data",
    ),
    BadInput("knob-latin1-rung", "knob file", rung_file("id: top-p\ntitle: caf\xe9\n".encode("latin-1")), "top-p.yaml: expected UTF-8 YAML text"),
    BadInput("knob-rung-is-a-directory", "knob file", rung_is_a_directory, "zz-dir.yaml: expected a YAML file, got a directory"),
    BadInput("knob-huge-file", "knob file", rung_file(b"# " + b"x" * (5 << 20) + b"\n"), "top-p.yaml: expected a knob file under"),
    BadInput("knob-list-for-a-flag", "knob file", rung_change("num-rollout: [1, 2]"), "changes.flags.num-rollout"),
    # --set values
    BadInput("set-count-as-word", "--set value", with_set("num-rollout=three"), "--set num-rollout=three: expected a whole number >= 1"),
    BadInput("set-negative-count", "--set value", with_set("num-rollout=-3"), "--set num-rollout=-3: expected a whole number >= 1"),
    BadInput("set-zero-count", "--set value", with_set("rollout-batch-size=0"), "--set rollout-batch-size=0"),
    BadInput("set-zero-samples", "--set value", with_set("n-samples-per-prompt=0"), "--set n-samples-per-prompt=0"),
    BadInput("set-inf", "--set value", with_set("global-batch-size=1e400"), "expected a finite number"),
    BadInput("set-beyond-int64", "--set value", with_set(f"seed={INT64_PLUS}"), "expected a value within int64"),
    BadInput("set-memory-share", "--set value", with_set("vllm-gpu-memory-utilization=2"), "expected a number in [0, 1]"),
    BadInput("set-without-equals", "--set value", with_set("num-rollout"), "expected FLAG=VALUE"),
    BadInput("set-bad-flag-name", "--set value", with_set("Num_Rollout=3"), "is not a VIME flag name"),
    BadInput(
        "set-rung-owned-flag",
        "--set value",
        with_set("rollout-top-p=0.9"),
        "--set rollout-top-p=0.9: rung top-p sets rollout-top-p",
    ),
    # site files (harness/spec/site.py)
    BadInput(
        "site-unknown-key", "site file", with_site("ray-adress: http://head:8265\n"), "ray-adress: unknown site key; allowed here: paths, vime-root"
    ),
    BadInput(
        "site-unknown-stage-key",
        "site file",
        with_site("stages:\n  p1:\n    gpus-per-nod: 4\n"),
        "stages.p1.gpus-per-nod: unknown site key; allowed here: hardware, gpus-per-node, actor-nodes, rollout-gpus, tensor-parallel",
    ),
    BadInput(
        "site-unknown-stage", "site file", with_site("stages:\n  p9:\n    gpus-per-node: 4\n"), "stages.p9: expected a stage of knobs/stages.yaml"
    ),
    BadInput(
        "site-path-key-not-a-placeholder", "site file", with_site("paths:\n  /data/x: /data/y\n"), "paths: expected keys that are knobs/ placeholders"
    ),
    BadInput("site-missing", "site file", cli("argv", *SPEC, "--site", "{work}/no-site.yaml"), "--site {work}/no-site.yaml: no such file"),
    BadInput(
        "site-overrides-a-rung-flag",
        "site file",
        with_site("flags:\n  rollout-temperature: 0.9\n", "argv", "--stage", "p1", "--rung", "temperature", "--backend", "vime"),
        "flags: rollout-temperature: rung temperature sets rollout-temperature",
    ),
    BadInput(
        "site-placeholder-reaches-launch",
        "site file",
        with_site(SITE_MISSING_CHECKPOINT, "run", "--stage", "p1", "--rung", "near-aligned", "--backend", "vime"),
        "--hf-checkpoint /path/to/Qwen3-30B-A3B: a placeholder from knobs/ladder/fp32-floor.yaml reached a launch; set its real path in the site file",
    ),
    # command-line paths and options
    BadInput(
        "run-runs-dir-is-a-file",
        "cli path",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--runs-dir", "{file}"),
        "--runs-dir {work}/a-file: is a file",
    ),
    BadInput(
        "run-runs-dir-under-a-file",
        "cli path",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--runs-dir", "{file}/runs"),
        "--runs-dir {work}/a-file/runs: {work}/a-file is a file",
    ),
    BadInput(
        "run-knobs-is-a-file",
        "cli path",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--knobs", "{file}", "--runs-dir", "{work}/runs"),
        "--knobs {work}/a-file: is a file",
    ),
    BadInput("argv-knobs-missing", "cli path", cli("argv", *SPEC, "--knobs", "{work}/nowhere"), "--knobs {work}/nowhere: no such directory"),
    BadInput(
        "run-vime-root-missing",
        "cli path",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--backend", "vime", "--vime-root", "{work}/vime", "--runs-dir", "{work}/runs"),
        "--vime-root {work}/vime: no such directory",
    ),
    BadInput(
        "run-vime-root-is-a-file",
        "cli path",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--backend", "vime", "--vime-root", "{file}", "--runs-dir", "{work}/runs"),
        "--vime-root {work}/a-file: is a file",
    ),
    BadInput(
        "ingest-out-is-users-directory", "cli path", ingest_out_users_dir, "--out {work}/results: an existing directory that is not a run directory"
    ),
    BadInput(
        "ingest-out-is-a-file",
        "cli path",
        cli("ingest", REPO / "tests/data/vime_logs/colocate_3_rollouts.log", "--out", "{file}"),
        "--out {work}/a-file: is a file",
    ),
    BadInput(
        "ingest-runs-dir-is-a-file",
        "cli path",
        cli("ingest", REPO / "tests/data/vime_logs/colocate_3_rollouts.log", "--runs-dir", "{file}"),
        "--runs-dir {work}/a-file: is a file",
    ),
    BadInput(
        "ingest-path-missing", "cli path", cli("ingest", "{work}/absent.log", "--out", "{work}/out"), "{work}/absent.log: no such file or directory"
    ),
    BadInput(
        "report-results-is-a-file",
        "cli path",
        cli("report", "--results", "{file}", "--out", "{work}/report"),
        "{work}/a-file: is a file, expected the Allure results directory",
    ),
    BadInput(
        "report-results-empty",
        "report input",
        lambda work: (work.joinpath("results").mkdir(), ["report", "--results", str(work / "results"), "--out", str(work / "report")])[-1],
        "holds no *-result.json",
    ),
    BadInput("report-results-unreadable", "report input", unreadable_results, "none of its 3 *-result.json files is a readable Allure result"),
    BadInput("report-out-is-users-directory", "report input", report_over_users_dir, "not empty and not made by `python -m harness report`"),
    BadInput("attribute-run-dir-is-a-file", "cli path", cli("attribute", "{file}"), "{work}/a-file"),
    BadInput("attribute-run-dir-missing", "cli path", cli("attribute", "{work}/nowhere"), "{work}/nowhere"),
    BadInput(
        "run-timeout-negative",
        "cli option",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--timeout", "-1", "--runs-dir", "{work}/runs"),
        "argument --timeout: expected a number of seconds > 0, got '-1'",
    ),
    BadInput(
        "run-timeout-zero",
        "cli option",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--timeout", "0", "--runs-dir", "{work}/runs"),
        "argument --timeout",
    ),
    BadInput(
        "run-timeout-word",
        "cli option",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--timeout", "soon", "--runs-dir", "{work}/runs"),
        "argument --timeout",
    ),
    BadInput(
        "run-unknown-option",
        "cli option",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--colour", "blue", "--runs-dir", "{work}/runs"),
        "unrecognized arguments: --colour",
    ),
    BadInput(
        "run-unknown-vime-flag",
        "cli option",
        cli("run", "--stage", "p0", "--rung", "fp8-plus-filters", "--set", "num-rolout=3", "--runs-dir", "{work}/runs"),
        "num-rolout",
    ),
    BadInput("run-over-users-directory", "run directory", run_over_users_dir, "is not a run directory written by this tool"),
    BadInput("ingest-out-onto-a-live-run", "run directory", ingest_out_onto_live_run, "a run directory whose trainer still writes to it"),
    BadInput("run-while-earlier-trainer-alive", "run directory", run_while_earlier_trainer_alive, "is still running"),
    # VIME logs
    BadInput(
        "log-tuple-dict-key",
        "log",
        log_case(STEP.format(n=0), "[2026-11-20 10:00:01] model.py:540 - step 1: {('train', 'loss'): 0.1}", STEP.format(n=2), END),
        "is a tuple, expected a metric name",
        ended=True,
    ),
    BadInput("log-tuple-key-last-line", "log", log_case(STEP.format(n=0), "step 1: {('a', 1): 2}"), "is a tuple"),
    # A log without an end line is no longer bad input (VIME prints none): it is labelled finished or
    # unfinished from its records. What is bad input: a length given that the log's own argument print denies.
    BadInput(
        "log-length-disagrees",
        "log",
        log_case(*ARGUMENTS_PRINT, STEP.format(n=0), STEP.format(n=1), STEP.format(n=2), extra=["--num-rollout", "5"]),
        "--num-rollout 5, but the log's arguments (line 2: num_rollout 3)",
    ),
    BadInput(
        "log-truncated-record",
        "log",
        log_case(STEP.format(n=0), "[2026-11-20 10:00:01] model.py:540 - step 1: {'train/loss': 0.0"),
        "truncated step record",
    ),
    BadInput(
        "log-duplicate-step-different-values",
        "log",
        log_case(STEP.format(n=0), STEP.format(n=0).replace("0.00", "0.05"), END),
        "step 0 logged again (first at line 1)",
        ended=True,
    ),
    BadInput("log-binary", "log", log_case(binary=b"\x00\x01\x02step 0: {}\n" * 10), "binary data"),
    BadInput("log-empty", "log", log_case(binary=b""), "empty file"),
    BadInput(
        "log-planted-call",
        "log",
        log_case(STEP.format(n=0), "step 1: {'x': __import__('os').system('echo planted')}", STEP.format(n=2), END),
        "is not a literal",
        ended=True,
    ),
    BadInput("log-no-records", "log", log_case("hello", "world"), "no step/rollout/perf/eval records"),
    # run directories
    BadInput("rundir-corrupt-status", "run directory", run_dir_case('{"state": "finis'), "status.json"),
    BadInput("rundir-status-not-a-state", "run directory", run_dir_case('{"state": "done"}'), "status.json"),
    BadInput("rundir-status-still-running", "run directory", run_dir_case('{"state": "running"}'), "status.json: still says running"),
    BadInput(
        "rundir-torn-metrics",
        "run directory",
        run_dir_case('{"state": "finished"}', {"metrics.jsonl": '{"kind": "step", "n": 0, "metrics": {}}\n{"kind": "st'}),
        "metrics.jsonl: line 2 is torn",
        ended=True,
    ),
    # debug dumps
    BadInput(
        "dump-rollout-id-string",
        "dump",
        dump_case(lambda: {"rollout_id": "zero", "samples": samples(2)}),
        "rollout_id: expected a whole number >= 0, got 'zero'",
    ),
    BadInput("dump-rollout-id-float", "dump", dump_case(lambda: {"rollout_id": 1.5, "samples": samples(2)}), "rollout_id: expected a whole number"),
    BadInput("dump-rollout-id-negative", "dump", dump_case(lambda: {"rollout_id": -1, "samples": samples(2)}), "rollout_id: expected a whole number"),
    BadInput("dump-rollout-id-list", "dump", dump_case(lambda: {"rollout_id": [0, 1], "samples": samples(2)}), "rollout_id: expected a whole number"),
    BadInput("dump-samples-not-dicts", "dump", dump_case(lambda: {"rollout_id": 0, "samples": [1, 2, 3]}), "samples: expected a list of dicts"),
    BadInput("dump-samples-a-dict", "dump", dump_case(lambda: {"rollout_id": 0, "samples": {"a": 1}}), "samples: expected a list of dicts"),
    BadInput(
        "dump-unequal-sample-counts",
        "dump",
        dump_case(lambda: train_dump(3, 2), "train_0_0.pt"),
        "unequal sample counts (3 log_probs, 2 rollout_log_probs, 3 loss_masks)",
    ),
    BadInput("dump-unequal-mask-count", "dump", dump_case(lambda: train_dump(2, 2, masks=1), "train_0_0.pt"), "unequal sample counts"),
    BadInput("dump-not-a-dict", "dump", dump_case(lambda: [1, 2, 3]), "expected a dict with 'rollout_id'"),
    BadInput(
        "dump-sample-field-wrong-type",
        "dump",
        dump_case(lambda: {"rollout_id": 0, "samples": [{"tokens": [1], "response_length": "long"}]}),
        "not in VIME's dump shape",
    ),
    BadInput("dump-planted-code", "dump", dump_case(lambda: {"rollout_id": 0, "samples": [], "x": Planted()}), "weights_only loading refuses"),
    BadInput(
        "dump-garbage-bytes",
        "dump",
        lambda work: (
            work.joinpath("d").mkdir(),
            work.joinpath("d", "rollout_0.pt").write_bytes(b"PK\x03\x04junk"),
            ["ingest", str(work / "d"), "--out", str(work / "o")],
        )[-1],
        "not a readable torch dump",
    ),
    # attribution inputs
    BadInput(
        "attribute-rollout-id-string",
        "attribution",
        dump_case(lambda: {"rollout_id": "x", "samples": samples(2)}, command="attribute"),
        "undecided: no readable dump",
        verdict=True,
    ),
    BadInput(
        "attribute-no-readable-dump",
        "attribution",
        lambda work: (
            work.joinpath("run", "dumps").mkdir(parents=True),
            work.joinpath("run", "dumps", "rollout_0.pt").write_bytes(b"junk"),
            work.joinpath("run", "status.json").write_text('{"state": "finished"}'),
            ["attribute", str(work / "run")],
        )[-1],
        "undecided: no readable dump",
        verdict=True,
    ),
]
