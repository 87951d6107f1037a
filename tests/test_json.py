"""The encoders of ``agentik._json`` against ``json.dumps``, the oracle."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik._json import dumps_ascii, dumps_compact

# Every kind of JSON value, and text with what encoders get wrong: lone
# surrogates, control characters, the line breaks JSON leaves raw, astral
# characters, unicode digits; floats at the edges (nan and the infinities
# too, which json.dumps writes as NaN and Infinity).
_text = st.text(
    st.characters(codec=None, categories=None, exclude_categories=())
    | st.sampled_from(["\ud800", "\udfff", "\x00", "\x1f", "\x7f", "\x85", "\u2028", "\u2029"])
    | st.sampled_from(["\U0001f600", "٣", "𝟘", '"', "\\", "/"])
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _text
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=40,
)


@given(_values)
def test_dumps_ascii_is_json_dumps(value: object) -> None:
    assert dumps_ascii(value) == json.dumps(value)


@given(_values)
def test_dumps_compact_is_json_dumps_compact(value: object) -> None:
    assert dumps_compact(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@given(st.dictionaries(st.integers() | st.floats() | st.booleans() | st.none(), _scalars))
def test_keys_that_are_not_text_are_converted_as_json_dumps_does(value: object) -> None:
    assert dumps_ascii(value) == json.dumps(value)
    assert dumps_compact(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_tuples_encode_as_arrays() -> None:
    assert dumps_ascii((1, "a", (None,))) == json.dumps((1, "a", (None,))) == '[1, "a", [null]]'


@pytest.mark.parametrize("value", [object(), {1, 2}, b"bytes", [1, {"a": object()}], {(1,): 2}])
def test_what_json_cannot_hold_is_refused_as_json_dumps_refuses_it(value: object) -> None:
    with pytest.raises(TypeError) as expected:
        json.dumps(value)
    for dumps in (dumps_ascii, dumps_compact):
        with pytest.raises(TypeError) as raised:
            dumps(value)
        assert str(raised.value) == str(expected.value)


def test_deep_nesting_fails_as_json_dumps_fails() -> None:
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        json.dumps(deep)
    for dumps in (dumps_ascii, dumps_compact):
        with pytest.raises(RecursionError):
            dumps(deep)


def test_nan_and_infinities_as_json_dumps_writes_them() -> None:
    values = [math.nan, math.inf, -math.inf]
    assert dumps_ascii(values) == json.dumps(values) == "[NaN, Infinity, -Infinity]"
