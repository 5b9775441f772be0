"""The trainer speaks the knobs' flag language: every rendered argv parses; typos are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.embedded import flags
from harness.embedded.settings import from_flags
from harness.spec.load import load_knobs
from harness.spec.render import render_argv
from harness.spec.resolve import resolve

REPO = Path(__file__).resolve().parents[2]
KNOBS = load_knobs(REPO / "knobs")


def _knob_flag_names() -> set[str]:
    """Every flag name written anywhere in knobs/: base, modes, stages, ladder rungs (all sections)."""
    knobs = REPO / "knobs"
    base = yaml.safe_load((knobs / "base.yaml").read_text())
    names = set(base["flags"]) | set(base["embedded"])
    for mode in base["modes"].values():
        names |= set(mode["flags"])
    for stage in yaml.safe_load((knobs / "stages.yaml").read_text())["stages"].values():
        names |= set(stage["flags"]) | set(stage["embedded"])
    for path in sorted((knobs / "ladder").glob("*.yaml")):
        for section in yaml.safe_load(path.read_text())["changes"].values():
            names |= set(section)
    return names


def test_every_knob_flag_name_is_known():
    names = _knob_flag_names()
    assert len(names) > 40
    assert sorted(n for n in names if n not in flags.BY_NAME) == []


@pytest.mark.parametrize("stage", sorted(KNOBS.stages))
def test_every_rendered_embedded_argv_parses(stage):
    cfg = KNOBS.stages[stage]
    checked = 0
    for rung_id, rung in sorted(KNOBS.rungs.items()):
        if stage not in rung.stages or "embedded" not in rung.backends:
            continue
        for mode in cfg.modes:
            argv = render_argv(resolve(KNOBS, stage, rung_id, mode, "embedded").flags)
            values, given = flags.parse(argv)
            from_flags(values)
            checked += 1
    assert checked > 0


def test_p0_render_lists_the_flags_it_does_not_honour():
    argv = render_argv(resolve(KNOBS, "p0", "fp8-plus-filters", "colocate", "embedded").flags)
    values, given = flags.parse(argv)
    skipped = {row["flag"]: row["reason"] for row in flags.not_honoured(given, values)}
    for name in ("vllm-all2all-backend", "recompute-granularity", "attention-backend", "vllm-router-policy", "vllm-gpu-memory-utilization"):
        assert skipped.get(name), name
    assert "rollout-top-p" not in skipped and "vllm-quantization" not in skipped


def test_typo_is_rejected_with_the_closest_flag():
    with pytest.raises(flags.FlagError, match=r"unknown flag --rollout-top-pp; did you mean --rollout-top-p\?"):
        flags.parse(["--rollout-top-pp", "0.9"])


def test_cli_typo_exits_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.embedded.train", "--num-rollout", "1", "--colocte"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert lines == ["error: unknown flag --colocte; did you mean --colocate?"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rollout-top-k", "forty"], "--rollout-top-k forty: expected int"),
        (["--tensor-model-parallel-size", "4"], "supports [1, 2]"),
        (["--embedded-inject", "token-shfit"], "unknown fault"),
        (["--embedded-inject", "stale-weights:0"], "stale-weights:K with K >= 1"),
    ],
)
def test_bad_values_are_named(argv, message):
    base = ["--hf-checkpoint", "x", "--prompt-data", "y", "--num-rollout", "1", "--rollout-batch-size", "1"]
    with pytest.raises(flags.FlagError, match=None) as err:
        from_flags(flags.parse(base + argv)[0])
    assert message in str(err.value)
