"""The literal reader: VIME's dict reprs, nan/inf, numpy 2 scalars; never code."""

import ast
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.records.pyliteral import LiteralSyntaxError, parse_dict, parse_literal


def test_reads_nan_inf_and_negative_inf():
    value = parse_dict("{'train/loss': nan, 'train/grad_norm': inf, 'rollout/log_probs': -inf, 'n': 3}")
    assert math.isnan(value["train/loss"])
    assert value["train/grad_norm"] == math.inf
    assert value["rollout/log_probs"] == -math.inf
    assert value["n"] == 3


def test_reads_numpy2_scalars_and_stray_tensors():
    value = parse_dict("{'a': np.float64(0.25), 'b': numpy.int64(7), 'c': tensor(0.5, device='cuda:0'), 'd': float('nan'), 'e': np.float32(-inf)}")
    assert value["a"] == 0.25 and value["b"] == 7 and value["c"] == 0.5
    assert math.isnan(value["d"]) and value["e"] == -math.inf


@pytest.mark.parametrize(
    "text",
    [
        "{'a': __import__('os').system('true')}",
        "{'a': os.getcwd()}",
        "{'a': 1 + 1}",
        "{'a': [x for x in range(3)]}",
        "{'a': some_name}",
        "{**other}",
        "{'a': lambda: 1}",
    ],
)
def test_refuses_anything_that_is_code(text):
    with pytest.raises(LiteralSyntaxError):
        parse_dict(text)


def test_truncated_dict_says_it_is_incomplete():
    with pytest.raises(LiteralSyntaxError, match="not a complete Python literal"):
        parse_dict("{'train/loss': 0.1, 'train/pg_")


def test_a_list_is_not_a_dict():
    with pytest.raises(LiteralSyntaxError, match="expected a dict"):
        parse_dict("[1, 2]")


scalars = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=20), st.none(), st.booleans())


@pytest.mark.property
@given(st.dictionaries(st.text(min_size=1, max_size=30), scalars, max_size=20))
def test_any_repr_of_a_metrics_dict_reads_back_equal(metrics):
    parsed = parse_literal(repr(metrics))
    assert parsed.keys() == metrics.keys()
    for key, value in metrics.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(parsed[key])
        else:
            assert parsed[key] == value and type(parsed[key]) is type(value)


finite = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(), st.text(max_size=20), st.none(), st.booleans())
nested = st.recursive(
    finite,  # Python's reader takes no nan or inf (they are read above)
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20,
)


@pytest.mark.property
@given(nested)
def test_nested_reprs_read_back_as_python_reads_them(value):
    # The reader is token based (no ast: harness/records/pyliteral.py says why); on any repr that
    # Python's own literal reader accepts it must agree with it, tuples and sets read as lists.
    text = repr(value)
    assert parse_literal(text) == ast.literal_eval(text)


def test_escapes_prefixes_and_joined_strings_read_as_python_reads_them():
    text = (
        "{'a': 'caf\\xe9 \\u4e2d \u4e2d \\\\ \\' \\n', 'b': r'\\d', 'c': b'\\x80' b'z', 'd': 'x' \"y\", 'e': (1,), 'f': (2), 'g': 0x1F, 'h': 1_000}"
    )
    assert parse_dict(text) == {**ast.literal_eval(text), "e": [1]}


@pytest.mark.parametrize(
    "text, message",
    [
        ("{'a': {'b': 1}", "'{' was never closed at column 1"),
        ("{'a': [1, 2}", "unmatched '}'"),
        ("{'a': 1 2}", "'2' at column 8 is not a literal"),
        ("{'a': np.nan}", "attribute np.nan"),
        ("{'a': f'{x}'}", "f-string"),
        ("{[1]: 2}", "dict key at column 1 is a list"),
        ("", "nothing to read"),
    ],
)
def test_what_is_refused_is_named_with_its_column(text, message):
    with pytest.raises(LiteralSyntaxError, match=re.escape(message)):
        parse_literal(text)
