"""The fast encoders of ``agentik._json`` against ``json.dumps``, the oracle."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentik._json as agentik_json
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


def test_the_c_encoder_is_the_one_in_use_where_python_has_it() -> None:
    if json.encoder.c_make_encoder is None:
        pytest.skip("this interpreter has no C JSON encoder")
    for dumps in (dumps_ascii, dumps_compact):
        assert not hasattr(dumps, "__self__")  # not JSONEncoder.encode, the fallback


def _fallback(dumps: object) -> bool:
    return isinstance(getattr(dumps, "__self__", None), json.JSONEncoder)


def test_without_the_c_encoder_the_library_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentik_json._encoder, "c_make_encoder", None)
    dumps = agentik_json._encoder_for(ensure_ascii=True, separators=(", ", ": "))
    assert _fallback(dumps)
    assert dumps({"a": [1, "é"]}) == json.dumps({"a": [1, "é"]})


def test_a_c_encoder_that_takes_other_arguments_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def changed(*args: object) -> object:
        raise TypeError("make_encoder() takes 10 arguments")

    monkeypatch.setattr(agentik_json._encoder, "c_make_encoder", changed)
    assert _fallback(agentik_json._encoder_for(ensure_ascii=False, separators=(",", ":")))


def test_a_c_encoder_that_answers_otherwise_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = json.encoder.c_make_encoder
    if real is None:
        pytest.skip("this interpreter has no C JSON encoder")

    def wrong(markers: object, *args: object) -> object:
        # Wrong only as agentik calls it (without cycle checks); right as the
        # library calls it, so the library stays the reference.
        if markers is None:
            return lambda value, level: ["null"]
        return real(markers, *args)

    monkeypatch.setattr(agentik_json._encoder, "c_make_encoder", wrong)
    assert _fallback(agentik_json._encoder_for(ensure_ascii=True, separators=(", ", ": ")))
