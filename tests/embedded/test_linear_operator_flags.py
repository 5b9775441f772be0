"""--embedded-linear-operator and the fp8-weights planted fault: bad values are one line each, before
anything is built (harness.embedded.settings, harness.embedded.injections)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.embedded import flags, injections
from harness.embedded.flags import FlagError
from harness.embedded.settings import from_flags
from harness.spec.load import load_knobs
from harness.spec.render import render_argv
from harness.spec.resolve import resolve

KNOBS = load_knobs(Path(__file__).resolve().parents[2] / "knobs")


def _settings(**overrides):
    argv = render_argv(resolve(KNOBS, "p1", "fp8-rollout", "colocate", "embedded", overrides).flags)
    values, _ = flags.parse(argv)
    return from_flags(values)


def test_the_candidate_parses_and_defaults_to_native():
    assert _settings().linear_operator == "native"
    assert _settings(**{"embedded-linear-operator": "fp8-block-linear"}).linear_operator == "fp8-block-linear"


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"embedded-linear-operator": "no-such-linear"}, "no linear operator of that name"),
        ({"embedded-linear-operator": "fp8-block-linear", "embedded-levers": "trainer-fp8-weights"}, "choose one"),
    ],
)
def test_bad_linear_operator_values_are_one_line(overrides, words):
    with pytest.raises(FlagError, match=words):
        _settings(**overrides)


@pytest.mark.parametrize("value", ["rollout-fp8-weight-bits:3", "rollout-fp8-weight-bits:0", "rollout-fp8-weight-bits:x"])
def test_the_weight_bits_fault_takes_fewer_bits_than_e4m3(value):
    with pytest.raises(FlagError, match="mantissa bits in 1..2"):
        injections.parse(value)
    assert injections.parse("rollout-fp8-weight-bits:1").names() == ["rollout-fp8-weight-bits:1"]
