"""Reading numbers and JSON from outside (``agentik._input``), as properties:
whatever the text, the answer is a value or an ``InputError``, never another
exception, and exactly the documented inputs are values."""

from __future__ import annotations

import contextlib
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._input import (
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    InputError,
    decimal_float,
    decimal_int,
    decode_json,
    json_depth,
)
from agentik.server import ConfigError, load_config

every_character = st.characters(exclude_categories=())
number_like = st.one_of(
    st.text(every_character, max_size=40),
    st.text(st.sampled_from("0123456789-+._eE ²¹٣１"), max_size=40),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["9" * 5000, "nan", "inf", "-inf", "1e400", "0x10", "1_000", "\u0663"]),
)
ASCII_INT = re.compile(r"-?[0-9]{1,31}")
FLOAT_TEXT = re.compile(r"(?=.{1,32}$)-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?", re.DOTALL)
"""What decimal_float reads, written independently of agentik._input."""


@settings(max_examples=500)
@given(text=number_like, low=st.integers(-(10**6), 10), span=st.integers(0, 10**20))
def test_decimal_int_is_ascii_digits_in_range(text: str, low: int, span: int) -> None:
    readable = bool(ASCII_INT.fullmatch(text)) and low <= int(text) <= low + span
    if not readable:
        with pytest.raises(InputError, match=rf"^n must be an integer {low}\.\.{low + span}, got "):
            decimal_int(text, "n", minimum=low, maximum=low + span)
        return
    assert decimal_int(text, "n", minimum=low, maximum=low + span) == int(text)


@settings(max_examples=500)
@given(text=number_like)
def test_decimal_float_is_ascii_and_finite(text: str) -> None:
    readable = bool(FLOAT_TEXT.fullmatch(text)) and math.isfinite(float(text))
    if not readable:
        with pytest.raises(InputError, match=r"^x must be a finite decimal number, got "):
            decimal_float(text, "x")
        return
    assert decimal_float(text, "x") == float(text)


# --- JSON ------------------------------------------------------------------------------

valid_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | valid_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(valid_text, children, max_size=4)
    ),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def nest(value: Any, levels: int, kind: str) -> Any:
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


@settings(max_examples=300)
@given(value=json_values, ascii_only=st.booleans())
def test_valid_json_decodes_to_itself(value: Any, ascii_only: bool) -> None:
    """Any JSON value without lone surrogates decodes to itself, whether its
    non-ASCII characters travel raw or as escapes (astral ones as pairs)."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert decode_json(text.encode()) == value


@settings(max_examples=200)
@given(value=json_values, extra=st.integers(0, 150), kind=st.sampled_from(["list", "dict"]))
def test_depth_is_exact_and_bounded(value: Any, extra: int, kind: str) -> None:
    """json_depth agrees with the value's nesting (when it must count), and
    decoding refuses exactly the values nested past MAX_JSON_DEPTH."""
    nested = nest(value, extra, kind)
    text = json.dumps(nested)
    if depth(nested) > MAX_JSON_DEPTH:
        assert json_depth(text) == depth(nested)
        with pytest.raises(InputError, match=r"nested deeper than 100 levels$"):
            decode_json(text.encode())
    else:
        assert decode_json(text.encode()) == nested


surrogates = st.characters(categories=["Cs"])


@settings(max_examples=200)
@given(value=json_values, lone=surrogates, data=st.data())
def test_a_lone_surrogate_anywhere_is_refused(value: Any, lone: str, data: st.DataObject) -> None:
    """Put one lone surrogate in a key or a string anywhere: refused, naming it."""
    where = data.draw(st.sampled_from(["value", "key", "inside"]))
    text = data.draw(valid_text)
    cut = data.draw(st.integers(0, len(text)))
    bad = text[:cut] + lone + text[cut:]
    document = {"v": value, "bad": bad} if where == "value" else {bad: value}
    if where == "inside":
        document = [value, [{"deep": [bad]}]]
    with pytest.raises(InputError, match=r"lone surrogate \(\\ud[89a-f][0-9a-f]{2}\)"):
        decode_json(json.dumps(document).encode())


@settings(max_examples=500)
@given(
    body=st.binary(max_size=300)
    | st.text(every_character).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_any_bytes_give_a_value_or_an_input_error(body: bytes) -> None:
    with contextlib.suppress(InputError):  # anything else (RecursionError …) fails the test
        decode_json(body)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 5000 + "]" * 5000, "nested deeper than 100 levels"),
        ("[" * 5000, "nested deeper than 100 levels"),
        ('"' + "[" * 5000 + '"', None),  # brackets in a string do not nest
        ("9" * (MAX_JSON_INT_DIGITS + 1), "longer than the 4300 allowed"),
        ("-" + "9" * MAX_JSON_INT_DIGITS, None),
        ("1e400", "out of range for a double"),
        ("1e-400", None),
        ("-0", None),
        ("NaN", "NaN is not valid JSON"),
        ('"\\ud83e\\udd9c"', None),
        ('"\\\\ud800"', None),  # an escaped backslash, then the letters ud800
    ],
)
def test_the_edges(text: str, message: str | None) -> None:
    if message is None:
        assert decode_json(text.encode()) == json.loads(text)
    else:
        with pytest.raises(InputError, match=re.escape(message)):
            decode_json(text.encode())


# --- configuration -------------------------------------------------------------------

NUMERIC = {
    "AGENTIK_MAX_QUEUED_TURNS": ("int", "max_queued_turns"),
    "AGENTIK_MAX_BODY_BYTES": ("int", "max_body_bytes"),
    "AGENTIK_TOOL_TIMEOUT": ("float", "tool_timeout"),
    "AGENTIK_GRACEFUL_TIMEOUT": ("float", "graceful_timeout"),
}


@settings(max_examples=300)
@given(variable=st.sampled_from(sorted(NUMERIC)), text=number_like)
def test_a_numeric_environment_variable_is_a_number_or_a_config_error(
    variable: str, text: str
) -> None:
    kind, field = NUMERIC[variable]
    if kind == "int":  # an int setting fits 64 bits
        readable = bool(ASCII_INT.fullmatch(text)) and 0 < int(text) <= 2**63 - 1
    else:
        readable = bool(FLOAT_TEXT.fullmatch(text)) and 0 < float(text) < math.inf
    if not readable:
        with pytest.raises(ConfigError, match=rf"^{variable}: \[limits\] {field} must be"):
            load_config(None, env={variable: text})
        return
    value = getattr(load_config(None, env={variable: text}).limits, field)
    assert value == (int(text) if kind == "int" else float(text))
