"""Values read from text that came from outside: decimal numbers and JSON.

Python's own readers accept more than a wire format or a setting should, and
fail in ways that escape as crashes:

- ``str.isdigit()`` is true for ``'²'`` (then ``int('²')`` raises) and for
  ``'٣'`` (which ``int()`` reads as 3); ``int()`` and ``float()`` also take
  ``' 7 '`` and ``'1_000'``, ``float()`` takes ``'nan'`` and ``'inf'``, and
  ``int()`` raises past 4,300 digits.
- ``json`` recurses once per nesting level (RecursionError near 1,000), turns
  ``1e400`` into ``inf``, and lets escaped lone surrogates (``"\\ud800"``)
  into ``str`` values that no UTF-8 encoder (SQLite's, the response's) takes.

So every number a client, an environment variable or a page token gives is
read by ``decimal_int`` or ``decimal_float`` (ASCII digits, bounded length),
and every JSON request body by ``decode_json``, which refuses what the stores
and encoders downstream could not take. All raise ``InputError`` (a
``ValueError``) whose message names the value; callers map it to their own
error (HTTP 400/422, a JSON-RPC error, a ``ConfigError``).
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate

from agentik._json import JsonValue, dumps_compact

MAX_NUMBER_CHARS = 32
"""Longest decimal text ``decimal_int``/``decimal_float`` read (signs, leading zeros included)."""
MAX_JSON_DEPTH = 100
"""Nested arrays/objects a JSON body may have: what protobuf's JSON parser (and
so the a2a-sdk) allows by default; AG-UI tool schemas and state are far flatter."""
MAX_JSON_INT_DIGITS = 4300
"""Digits of a JSON integer: the interpreter's default conversion limit, fixed
here so the bound does not move with ``sys.set_int_max_str_digits``."""

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class InputError(ValueError):
    """Text from outside is not the value it should be; the message names it."""


class InvalidUtf8(InputError):
    """Bytes from outside are not UTF-8."""


def shown(text: str, limit: int = 40) -> str:
    """``repr`` of at most ``limit`` characters: safe to log and to encode."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


MAX_ID_LENGTH = 200
"""Longest conversation id (or idempotency key) a client may send."""


def checked_id(value: str, what: str = "conversation id") -> str:
    """``value`` if it is an id as every transport takes one: 1..``MAX_ID_LENGTH``
    printable characters, not only spaces (so no control character, and not
    U+001F, which separates an owner from an id in stored ids)."""
    if not value.strip() or len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise InputError(
            f"{what} must be 1..{MAX_ID_LENGTH} printable characters, not only spaces,"
            f" got {shown(value)}"
        )
    return value


def decimal_int(text: str, what: str, *, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    """``text`` as an integer in ``minimum..maximum``: ASCII digits, an optional
    ``-``, at most ``MAX_NUMBER_CHARS`` characters, nothing else."""
    if len(text) <= MAX_NUMBER_CHARS and _INT.fullmatch(text):
        value = int(text)
        if minimum <= value <= maximum:
            return value
    raise InputError(f"{what} must be an integer {minimum}..{maximum}, got {shown(text)}")


def decimal_float(text: str, what: str) -> float:
    """``text`` as a finite float: ASCII ``-1.5e3`` forms only (no ``nan``,
    ``inf``, ``_`` or spaces), at most ``MAX_NUMBER_CHARS`` characters."""
    if len(text) <= MAX_NUMBER_CHARS and _FLOAT.fullmatch(text):
        value = float(text)
        if math.isfinite(value):
            return value
    raise InputError(f"{what} must be a finite decimal number, got {shown(text)}")


# --- JSON ---------------------------------------------------------------------

_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_AS_PARENTHESES = str.maketrans("[{]}", "(())")
_STEP = {"(": 1, ")": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> JsonValue:
    raise InputError(f"{name} is not valid JSON")


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_JSON_INT_DIGITS:
        raise InputError(
            f"an integer of {digits} digits is longer than the {MAX_JSON_INT_DIGITS} allowed"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"the number {shown(text, 20)} is out of range for a double")
    return value


_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_bounded_int, parse_float=_finite_float
)
"""One decoder, reused: ``json.loads(text, parse_constant=…)`` builds a new one per call."""


def json_depth(text: str) -> int:
    """An upper bound of how deeply arrays and objects nest in ``text`` (exact
    for valid JSON; brackets inside strings do not count), without recursing.

    Below ``MAX_JSON_DEPTH`` brackets in all, two counts suffice. Otherwise the
    brackets outside strings are kept (escapes removed with ``str.replace``, a
    ``split`` on the quotes left, one regular-expression pass: all in C), the
    innermost pairs removed in one ``str.replace`` (exactly one level less:
    that is what makes a wide document of many small objects cheap), and the
    running depth of what is left is summed in C-implemented iterators, about
    0.15 s for a body of a million brackets, the worst case.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0  # cannot nest deeper than the bound: the common case
    if "\\" in text:  # drop escaped backslashes, then escaped quotes: left to
        # right, as a decoder pairs them, so every quote left opens or closes a string
        text = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(text.split('"')[::2])
    brackets = _NOT_BRACKET.sub("", outside).translate(_AS_PARENTHESES)
    rest = brackets.replace("()", "")
    if rest == brackets:
        return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    return 1 + max(accumulate(map(_STEP.__getitem__, rest)), default=0)


def decode_json(body: bytes) -> JsonValue:
    """Strict JSON from UTF-8 bytes.

    Refused (``InputError``): invalid UTF-8, invalid JSON, ``NaN``/``Infinity``,
    nesting deeper than ``MAX_JSON_DEPTH``, integers longer than
    ``MAX_JSON_INT_DIGITS`` digits, numbers beyond a double (``1e400``), and
    escaped lone surrogates in any string, keys included (an escaped pair is
    one character and fine).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidUtf8(f"not valid UTF-8 (byte {error.start})") from error
    if json_depth(text) > MAX_JSON_DEPTH:
        raise InputError(f"arrays and objects are nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value: JsonValue = _DECODER.decode(text)
    except InputError:
        raise
    except ValueError as error:
        raise InputError(str(error)) from error
    # Strict UTF-8 text holds no surrogates: only a \\uD800-\\uDFFF escape makes
    # one. Where such an escape appears, encode the value once to find out
    # whether any is left unpaired (a pair was already joined into one character).
    if _SURROGATE_ESCAPE.search(text):
        try:
            dumps_compact(value).encode("utf-8")
        except UnicodeEncodeError as error:
            bad = error.object[error.start : error.end]
            raise InputError(
                f"a string holds a lone surrogate ({bad.encode('unicode_escape').decode()}),"
                " which is not a Unicode character"
            ) from None
    return value
