"""Properties of the merge and the renderer: what VIME receives is exactly the resolved spec."""

from __future__ import annotations

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from harness.spec import parse_argv, render_argv
from harness.spec.resolve import _apply

flag_names = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){0,3}", fullmatch=True)
# Values as they appear in knobs: switches, counts, fractions, words and paths. Strings that YAML
# would read as another type are exactly what a knob cannot carry, so they are excluded.
words = st.from_regex(r"[a-z_/][a-zA-Z0-9_./:-]{0,20}", fullmatch=True).filter(
    lambda s: s not in {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}
)
values = st.one_of(st.just(True), st.integers(-5, 10**6), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), words)
flag_dicts = st.dictionaries(flag_names, values, max_size=12)
layers = st.dictionaries(flag_names, st.one_of(st.none(), values), max_size=8)


@pytest.mark.property
@given(flag_dicts)
def test_argv_round_trips_to_the_resolved_flags(flags):
    argv = render_argv(flags)
    note(f"argv={argv}")
    assert parse_argv(argv) == flags


@pytest.mark.property
@given(st.lists(layers, max_size=5))
def test_merge_later_layers_win_and_null_deletes(stack):
    merged, provenance = {}, {}
    for i, layer in enumerate(stack):
        _apply(merged, provenance, layer, f"layer{i}")
    for name in {k for layer in stack for k in layer}:
        last = [layer[name] for layer in stack if name in layer][-1]
        if last is None:
            assert name not in merged, f"{name} was deleted by the last layer that set it"
        else:
            assert merged[name] == last
            assert provenance[name] == f"layer{max(i for i, layer in enumerate(stack) if name in layer)}"
