"""What a failed argument check reports, shared by both validation engines. Pure.

A ``Failure`` names the bad field (its path) and the rule broken, in words the
model can act on: ``field 'points[1].x' must be an integer, got a number 1.5``.
Both engines (``_closures`` and ``_schema_errors``) build the same phrases
through the helpers here, so the model reads one style whichever checked it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from agentik._json import JsonValue


@attrs.define
class Failure:
    """Why a value does not match: the field path and the rule broken.

    ``path`` lists keys and indices innermost first: a check appends its own
    step as the failure travels out, so the valid case builds no path at all.
    """

    path: list[str | int]
    message: str

    def field(self) -> str:
        """The path as the model would write it: ``a.b[2]``; empty for the whole value."""
        text = ""
        for part in reversed(self.path):
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text


Check = Callable[[JsonValue], Failure | None]
"""A compiled schema: None for a valid value, else the ``Failure``."""


class SchemaError(ValueError):
    """The schema itself is unusable: invalid for its dialect, or a ``$ref`` that leads nowhere."""


TYPE_LABELS: dict[str, str] = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def describe(value: JsonValue) -> str:
    """A short phrase for a value in an error message: ``a string "abc"``."""
    if value is None:
        return "null"
    text = short_json(value)
    if isinstance(value, bool):
        kind = "a boolean"
    elif isinstance(value, int | float):
        kind = "a number"
    elif isinstance(value, str):
        kind = "a string"
    elif isinstance(value, list):
        kind = "an array"
    else:
        kind = "an object"
    return f"{kind} {text}"


def _json(value: object) -> str:
    """``value`` as JSON, readable (not ASCII-escaped) but for lone surrogates,
    escaped as JSON writes them: a split emoji the model sent escaped
    ("\\ud83d") must not come back raw, which no UTF-8 store can keep."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace").decode()


def short_json(value: object, limit: int = 40) -> str:
    """``value`` as JSON, cut to ``limit`` characters (an error message quotes, never dumps)."""
    text = _json(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(text: str, limit: int = 64) -> str:
    """``text`` in quotes (``repr``), cut to ``limit`` characters with ``…``:
    what a model sent, quoted in an answer, never repeated whole. 64, the
    longest valid toolset or tool name, leaves every valid name whole."""
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return repr(text)


def type_message(names: list[str], value: JsonValue) -> str:
    """``must be an integer or null, got a string "2"``."""
    expected = " or ".join(TYPE_LABELS.get(name, name) for name in names)
    return f"must be {expected}, got {describe(value)}"


def enum_message(options: list[JsonValue], value: JsonValue) -> str:
    """``must be one of "red", "green", got a string "blue"`` (``must be "x"`` for one)."""
    listed = ", ".join(_json(o) for o in options)
    expected = f"must be {listed}" if len(options) == 1 else f"must be one of {listed}"
    return f"{expected}, got {describe(value)}"


BOUND_SYMBOLS = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}
LENGTH_WORDS = {
    "minLength": ("at least", "characters"),
    "maxLength": ("at most", "characters"),
    "minItems": ("at least", "items"),
    "maxItems": ("at most", "items"),
    "minProperties": ("at least", "fields"),
    "maxProperties": ("at most", "fields"),
}


def bound_message(keyword: str, bound: JsonValue, value: JsonValue) -> str:
    """``must be >= 0, got a number -1``."""
    return f"must be {BOUND_SYMBOLS[keyword]} {bound}, got {describe(value)}"


def length_message(keyword: str, limit: JsonValue, size: int) -> str:
    """``must have at most 5 characters, got 6``."""
    word, unit = LENGTH_WORDS[keyword]
    shown = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
    return f"must have {word} {shown} {unit}, got {size}"


def pattern_message(pattern: str, value: JsonValue) -> str:
    """``must match the pattern '^[a-z]+$', got a string "AB"``."""
    return f"must match the pattern {pattern!r}, got {describe(value)}"


def not_accepted_message(properties: list[str], patterns: list[str]) -> str:
    """For a field ``additionalProperties: false`` refuses: what would have been accepted."""
    accepted = [*properties, *(f"keys matching {p!r}" for p in patterns)]
    return f"is not an accepted field; accepted: {', '.join(accepted) or 'none'}"


ONE_OF_MANY = "matches more than one of the allowed forms; expected one"


def merge(failures: list[Failure], base: list[str | int]) -> Failure:
    """One failure for a value at ``base`` that no branch of ``anyOf``/``oneOf`` accepts.

    The deepest failure when a branch got inside the value (it is the branch
    the model meant); otherwise the alternatives joined: ``must be a string
    or null, got a number 5``.
    """
    deepest = max(failures, key=lambda f: len(f.path))
    if len(deepest.path) > len(base):
        return deepest
    alternatives: list[str] = []
    for failure in failures:
        head = failure.message.removeprefix("must be ").split(", got ")[0]
        if head not in alternatives:
            alternatives.append(head)
    got = failures[0].message.partition(", got ")[2]
    joined = f"must be {' or '.join(alternatives)}" + (f", got {got}" if got else "")
    return Failure(list(base), joined)
