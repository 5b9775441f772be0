"""tools/control_sizes.py without runs: which --inject values it takes, how a size reads, the
boundary localised at another k from recorded ratios, and bad input as one line with exit code 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.embedded.flags import FlagError

pytestmark = pytest.mark.attribution

TOOL = Path(__file__).resolve().parents[2] / "tools" / "control_sizes.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("control_sizes", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_control_reads_with_its_planted_boundary_and_size(tool):
    assert tool.control_of("trainer-softmax-bits:7") == ("trainer-softmax-bf16", "trainer-softmax-bits", "layer.0.attention")
    assert tool.control_of("rollout-lse-bf16")[2] == "logsumexp"
    assert tool.control_of("trainer-tp-reduce-bits:3")[2] == "layer.0.mlp"
    assert tool.control_of("rollout-fp8-weight-scale:2") == ("rollout-fp8-weight-scale:2", "rollout-fp8-weight-scale", "layer.0.attention")
    assert tool.control_of("none") == ("none", "none", None)
    assert [tool.size_of(v) for v in ("rollout-lse-bf16", "rollout-lse-bits:3", "rollout-fp8-weight-scale:0.5", "none")] == [
        "7 bits (bf16)",
        "3 bits",
        "F=0.5",
        "-",
    ]
    for bad in ("token-shift", "rollout-lse-bf16,trainer-softmax-bf16"):
        with pytest.raises(FlagError, match="expected one numerical control"):
            tool.control_of(bad)


def test_localised_at_another_k_is_the_first_row_beyond_it(tool):
    ratios = {"embedding": 0.0, "layer.0.attention": 15.6, "layer.1.attention": 1.3, "selected_logprob": 70.0}
    assert tool.localised_at(ratios, 4.0) == "layer.0.attention"
    assert tool.localised_at(ratios, 58.0) == "selected_logprob"
    assert tool.localised_at(ratios, 100.0) == "none"


def test_localised_with_the_own_input_check_names_the_side(tool):
    ratios = {"embedding": 0.0, "layer.0.attention": 4.4, "final_norm": 0.7, "logsumexp": 1.9}
    own = {"embedding": {"trainer": 0.0, "rollout": 0.0}, "layer.0.attention": {"trainer": 8.7, "rollout": 1.0}, "final_norm": {"rollout": 2.0}}
    assert tool.localised_at(ratios, 58.0) == "none"  # the cross-engine rule alone
    assert tool.localised_at(ratios, 58.0, own, 4.1) == "layer.0.attention (trainer)"
    assert tool.localised_at(ratios, 58.0, own, 9.0) == "none"
    assert tool.localised_at(ratios, 1.5, own, 9.0) == "layer.0.attention"  # the first row either rule breaks
    entry = {"inject": "trainer-softmax-bits:3", "planted": "layer.0.attention", "own_ratios": own}
    assert tool.side_of("trainer-softmax-bits:3") == "trainer" and tool.side_of("rollout-fp8-weight-scale:2") == "rollout"
    assert tool.own_at_planted(entry) == 8.7
    assert tool.largest_own(entry) == ("final_norm (rollout)", 2.0)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--inject", "bogus"], "--embedded-inject bogus: unknown fault"),
        (["--inject", "trainer-softmax-bits:0"], "N mantissa bits in 1..23"),
        (["--inject", "rollout-fp8-weight-scale:2"], "acts only on the fp8 rollout; give --rung fp8-rollout alone"),
        ([], "--inject: give at least one control"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tool, tmp_path, capsys, argv, says):
    assert tool.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and len(err.strip().splitlines()) == 1, err
