"""Every command line the spec renders for a real VIME cluster gets through VIME's parsers and
start-up checks (as the flag table and harness/spec/vime_rules.py know them), or says why it is
not rendered. The matrix is small, so it is enumerated whole rather than sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import DEFAULT_KNOBS_DIR
from harness.spec import SpecError, load_knobs, parse_argv, render_argv, resolve, validate
from harness.spec.backends import backend
from harness.spec.cluster import skip_reason, stage_hardware
from harness.spec.models import load_model
from harness.spec.render import argv_lines
from harness.spec.vime_flags import flag_problem, load_flag_table

KNOBS = load_knobs(DEFAULT_KNOBS_DIR)
MATRIX = [(stage, rung.id, mode) for rung in KNOBS.rungs.values() for stage in rung.stages for mode in KNOBS.stages[stage].modes]


@pytest.mark.parametrize(("stage", "rung_id", "mode"), MATRIX, ids=["-".join(case) for case in MATRIX])
def test_every_vime_argv_passes_the_table_and_the_rules_or_says_why_not(stage, rung_id, mode):
    rung = KNOBS.rungs[rung_id]
    reason = skip_reason(KNOBS, rung, "vime")
    if reason:
        with pytest.raises(SpecError) as err:
            resolve(KNOBS, stage, rung_id, mode, "vime")
        assert err.value.problems == [reason]
        assert reason.startswith(f"knobs/ladder/{rung_id}.yaml: ") and "\n" not in reason
        return
    spec = validate(resolve(KNOBS, stage, rung_id, mode, "vime"), KNOBS)
    # What the launcher submits: the rendered spec plus the dump flags it adds.
    argv = render_argv(spec.flags) + backend("vime").output_flags(Path("/runs/x"), spec.flags)
    table = load_flag_table(KNOBS.root, KNOBS.base.vime_line)
    problems = [p for name, value in parse_argv(argv).items() if (p := flag_problem(name, value, table))]
    assert not problems, problems
    _, per_node = stage_hardware(KNOBS, stage)
    assert spec.flags["num-gpus-per-node"] == per_node
    for name, value in load_model(KNOBS.root, KNOBS.base.model.vime).flags.items():
        assert spec.flags[name] == value, f"model flag --{name} not rendered as the model file says"


def test_the_matrix_covers_every_rung_and_only_the_declared_rungs_are_left_out():
    left_out = {rung for stage, rung, mode in MATRIX if skip_reason(KNOBS, KNOBS.rungs[rung], "vime")}
    assert {rung for _, rung, _ in MATRIX} == set(KNOBS.rungs)
    # fp32-floor: VIME forces bf16; top-p: RL-Align's replay check; stale-weights: embedded-only fault;
    # processed-replay and true-on-policy: the embedded trainer's own switches (backends: [embedded]).
    assert left_out == {"fp32-floor", "top-p", "stale-weights", "processed-replay", "true-on-policy"}


def test_gpus_per_node_follow_the_hardware():
    assert stage_hardware(KNOBS, "p0") == ("B200", 8)
    for stage in ("p1", "p2", "p3"):
        assert stage_hardware(KNOBS, stage) == ("GB200", 4)


def test_embedded_argv_carries_no_cluster_only_flags():
    spec = resolve(KNOBS, "p1", "fp8-plus-filters", "colocate", "embedded")
    assert "num-gpus-per-node" not in spec.flags and "num-layers" not in spec.flags
    assert "router-policy" not in spec.flags


def test_the_equivalent_rung_says_what_it_stands_for():
    spec = resolve(KNOBS, "p3", "candidate-operator", "colocate", "vime")
    (note,) = spec.notes
    assert note.startswith("knobs/ladder/candidate-operator.yaml: on-vime: rendered as its nearest VIME equivalent")
    assert spec.to_dict()["notes"] == [note]


def test_the_docs_show_the_baseline_argv_as_rendered():
    page = (DEFAULT_KNOBS_DIR.parent / "docs" / "vime-argv.md").read_text()
    section = page[page.index("## The baseline as submitted") :]
    start = section.index("```text\n") + len("```text\n")
    shown = section[start : section.index("```", start)].splitlines()
    spec = validate(resolve(KNOBS, "p1", "fp8-plus-filters", "colocate", "vime"), KNOBS)
    assert shown == argv_lines(render_argv(spec.flags)), "docs/vime-argv.md: regenerate the argv block with `python -m harness argv`"
