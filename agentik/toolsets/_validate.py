"""A small JSON Schema validator, compiled to closures once per schema. Pure.

Covers what ``@tool`` generates and what MCP servers commonly send: ``type``
(one or a list), ``properties``, ``required``, ``additionalProperties``,
``items`` / ``prefixItems``, ``enum``, ``const``, ``anyOf`` / ``oneOf`` /
``allOf``, local ``$ref`` (``#/$defs/...``, recursion included), numeric
bounds, string and array lengths, ``pattern``, and boolean schemas. Other
keywords are ignored: a tool may still refuse its arguments itself.

A check returns None for a valid value, or a ``Failure`` whose path names the
bad field; paths are built only on failure, so the valid case allocates
nothing but what the checks themselves need.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

import attrs

from agentik._input import InputError, decimal_int
from agentik._json import JsonValue


@attrs.define
class Failure:
    """Why a value does not match: the field path (keys and indices) and the rule broken."""

    path: list[str | int]
    message: str

    def field(self) -> str:
        """The path as the model would write it: ``a.b[2]``; empty for the whole value."""
        text = ""
        for part in reversed(self.path):
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text


Check = Callable[[JsonValue], Failure | None]


class SchemaError(ValueError):
    """The schema itself cannot be compiled (for instance, a ``$ref`` that leads nowhere)."""


def _is_integer(value: JsonValue) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPES: dict[str, tuple[str, Callable[[JsonValue], bool]]] = {
    "object": ("an object", lambda v: isinstance(v, dict)),
    "array": ("an array", lambda v: isinstance(v, list)),
    "string": ("a string", lambda v: isinstance(v, str)),
    "integer": ("an integer", _is_integer),
    "number": ("a number", _is_number),
    "boolean": ("a boolean", lambda v: isinstance(v, bool)),
    "null": ("null", lambda v: v is None),
}


def describe(value: JsonValue) -> str:
    """A short phrase for a value in an error message: ``a string "abc"``."""
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > 40:
        text = text[:37] + "..."
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


def compile_schema(schema: JsonValue) -> Check:
    """Compile ``schema`` into a check; raises ``SchemaError`` if it cannot be compiled."""
    return _Compiler(schema).compile(schema)


class _Compiler:
    def __init__(self, root: JsonValue) -> None:
        self._root = root
        self._refs: dict[str, Check] = {}

    def compile(self, schema: JsonValue) -> Check:
        if schema is True or schema == {}:
            return _accept
        if schema is False:
            return _refuse
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}")
        checks: list[Check] = []
        ref = schema.get("$ref")
        if isinstance(ref, str):
            checks.append(self._ref(ref))
        checks.extend(self._leaf_checks(schema))
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            checks.append(self._object(schema))
        if "items" in schema or "prefixItems" in schema:
            checks.append(self._array(schema))
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                checks.append(self._any_of([self.compile(b) for b in branches], key == "oneOf"))
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            checks.extend(self.compile(b) for b in all_of)
        return _all(checks)

    def _ref(self, ref: str) -> Check:
        compiled = self._refs.get(ref)
        if compiled is not None:
            return compiled
        target = self._resolve(ref)
        slot: list[Check] = []

        def deferred(value: JsonValue) -> Failure | None:
            return slot[0](value)

        # Registered before compiling the target, so a recursive schema terminates.
        self._refs[ref] = deferred
        slot.append(self.compile(target))
        return deferred

    def _resolve(self, ref: str) -> JsonValue:
        if not ref.startswith("#"):
            raise SchemaError(f"$ref {ref!r} is not local; expected '#/...'")
        node = self._root
        for raw in ref[1:].split("/")[1:]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and (index := _array_index(part, len(node))) is not None:
                node = node[index]
            else:
                raise SchemaError(f"$ref {ref!r} leads nowhere in the schema")
        return node

    def _leaf_checks(self, schema: dict[str, JsonValue]) -> list[Check]:
        checks: list[Check] = []
        kind = schema.get("type")
        if kind is not None:
            checks.append(_type_check(kind))
        if "enum" in schema and isinstance(schema["enum"], list):
            checks.append(_enum_check(schema["enum"]))
        if "const" in schema:
            checks.append(_enum_check([schema["const"]]))
        checks.extend(_bound_checks(schema))
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            checks.append(_pattern_check(pattern))
        return checks

    def _object(self, schema: dict[str, JsonValue]) -> Check:
        raw_properties = schema.get("properties")
        properties = raw_properties if isinstance(raw_properties, dict) else {}
        compiled = {name: self.compile(sub) for name, sub in properties.items()}
        raw_required = schema.get("required")
        required = (
            tuple(r for r in raw_required if isinstance(r, str))
            if isinstance(raw_required, list)
            else ()
        )
        additional = schema.get("additionalProperties", True)
        extra: Check | None = None if additional is True else self.compile(additional)
        allowed = ", ".join(compiled) or "none"

        def check(value: JsonValue) -> Failure | None:
            if not isinstance(value, dict):
                return None  # the "type" keyword, if any, reports this
            for name in required:
                if name not in value:
                    return Failure([name], "is required")
            for name, item in value.items():
                sub = compiled.get(name)
                if sub is None:
                    if extra is None:
                        continue
                    if extra is _refuse:
                        return Failure([name], f"is not an accepted field; accepted: {allowed}")
                    sub = extra
                failure = sub(item)
                if failure is not None:
                    failure.path.append(name)
                    return failure
            return None

        return check

    def _array(self, schema: dict[str, JsonValue]) -> Check:
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        positional: list[Check] = []
        rest: Check | None = None
        if isinstance(prefix, list):
            positional = [self.compile(s) for s in prefix]
            rest = None if items is None else self.compile(items)
        elif isinstance(items, list):  # draft 4-7 tuple form
            positional = [self.compile(s) for s in items]
        elif items is not None:
            rest = self.compile(items)

        def check(value: JsonValue) -> Failure | None:
            if not isinstance(value, list):
                return None
            for position, item in enumerate(value):
                sub = positional[position] if position < len(positional) else rest
                if sub is None:
                    continue
                failure = sub(item)
                if failure is not None:
                    failure.path.append(position)
                    return failure
            return None

        return check

    def _any_of(self, branches: list[Check], exactly_one: bool) -> Check:
        def check(value: JsonValue) -> Failure | None:
            failures: list[Failure] = []
            for branch in branches:
                failure = branch(value)
                if failure is None:
                    if not exactly_one:
                        return None
                else:
                    failures.append(failure)
            matched = len(branches) - len(failures)
            if matched == 1 or (matched > 1 and not exactly_one):
                return None
            if matched > 1:
                return Failure([], "matches more than one of the allowed forms; expected one")
            return _merge(failures)

        return check


def _array_index(part: str, length: int) -> int | None:
    """A JSON-pointer array index below ``length``: ASCII digits only, so '²'
    (which ``isdigit`` accepts and ``int`` refuses) and '١' lead nowhere."""
    try:
        return decimal_int(part, "an array index", maximum=length - 1)
    except InputError:
        return None


def _merge(failures: list[Failure]) -> Failure:
    """One failure for a value no branch accepts: the deepest, or the alternatives joined."""
    deepest = max(failures, key=lambda f: len(f.path))
    if deepest.path:
        return deepest
    wanted = [f.message.removeprefix("must be ") for f in failures]
    alternatives: list[str] = []
    for want in wanted:
        head = want.split(", got ")[0]
        if head not in alternatives:
            alternatives.append(head)
    got = failures[0].message.partition(", got ")[2]
    return Failure([], f"must be {' or '.join(alternatives)}" + (f", got {got}" if got else ""))


def _accept(value: JsonValue) -> Failure | None:
    return None


def _refuse(value: JsonValue) -> Failure | None:
    return Failure([], "is not allowed")


def _all(checks: list[Check]) -> Check:
    if not checks:
        return _accept
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def check(value: JsonValue) -> Failure | None:
        for sub in frozen:
            failure = sub(value)
            if failure is not None:
                return failure
        return None

    return check


def _type_check(kind: JsonValue) -> Check:
    names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    known = [_TYPES[n] for n in names if isinstance(n, str) and n in _TYPES]
    if not known:
        return _accept
    expected = " or ".join(label for label, _ in known)
    tests = tuple(test for _, test in known)

    def check(value: JsonValue) -> Failure | None:
        for test in tests:
            if test(value):
                return None
        return Failure([], f"must be {expected}, got {describe(value)}")

    return check


def _same(a: JsonValue, b: JsonValue) -> bool:
    # JSON equality: 1 == 1.0, but true is not 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _enum_check(options: list[JsonValue]) -> Check:
    listed = ", ".join(json.dumps(o, ensure_ascii=False) for o in options)
    expected = f"must be {listed}" if len(options) == 1 else f"must be one of {listed}"
    hashable = all(isinstance(o, str) for o in options)
    fast = frozenset(o for o in options if isinstance(o, str))

    def check(value: JsonValue) -> Failure | None:
        if hashable:
            if isinstance(value, str) and value in fast:
                return None
        elif any(_same(value, option) for option in options):
            return None
        return Failure([], f"{expected}, got {describe(value)}")

    return check


_BOUNDS: tuple[tuple[str, Callable[[float, float], bool], str], ...] = (
    ("minimum", lambda v, b: v >= b, ">="),
    ("maximum", lambda v, b: v <= b, "<="),
    ("exclusiveMinimum", lambda v, b: v > b, ">"),
    ("exclusiveMaximum", lambda v, b: v < b, "<"),
)
_LENGTHS: tuple[tuple[str, type, bool, str], ...] = (
    ("minLength", str, True, "characters"),
    ("maxLength", str, False, "characters"),
    ("minItems", list, True, "items"),
    ("maxItems", list, False, "items"),
    ("minProperties", dict, True, "fields"),
    ("maxProperties", dict, False, "fields"),
)


def _bound_checks(schema: dict[str, JsonValue]) -> list[Check]:
    checks: list[Check] = []
    for key, holds, symbol in _BOUNDS:
        bound = schema.get(key)
        if _is_number(bound) and isinstance(bound, int | float) and math.isfinite(bound):
            checks.append(_bound_check(float(bound), holds, f"must be {symbol} {bound}"))
    for key, container, at_least, unit in _LENGTHS:
        limit = schema.get(key)
        if isinstance(limit, int) and not isinstance(limit, bool):
            word = "at least" if at_least else "at most"
            checks.append(
                _length_check(limit, container, at_least, f"must have {word} {limit} {unit}")
            )
    return checks


def _bound_check(bound: float, holds: Callable[[float, float], bool], message: str) -> Check:
    def check(value: JsonValue) -> Failure | None:
        if _is_number(value) and isinstance(value, int | float) and not holds(value, bound):
            return Failure([], f"{message}, got {describe(value)}")
        return None

    return check


def _length_check(limit: int, container: type, at_least: bool, message: str) -> Check:
    def check(value: JsonValue) -> Failure | None:
        if isinstance(value, container) and isinstance(value, str | list | dict):
            size = len(value)
            if (size < limit) if at_least else (size > limit):
                return Failure([], f"{message}, got {size}")
        return None

    return check


def _pattern_check(pattern: str) -> Check:
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise SchemaError(
            f"pattern {pattern!r} is not a valid regular expression: {error}"
        ) from error

    def check(value: JsonValue) -> Failure | None:
        if isinstance(value, str) and regex.search(value) is None:
            return Failure([], f"must match the pattern {pattern!r}, got {describe(value)}")
        return None

    return check
