"""The fast engine: a schema compiled to closures, for the keywords it implements exactly. Pure.

``jsonschema`` is the reference engine and checks any schema, but costs 30 to
100 µs a call; these closures cost 2 to 6 µs (``bench/validate.py``). They
are used only where ``applies(schema)`` holds: every (sub)schema uses only the
keywords below, each with its full Draft 2020-12 meaning, and ``$ref`` is a
local JSON pointer. That covers every schema ``@tool`` generates and most
that MCP servers send; anything else (``patternProperties``, ``not``,
``if``, ``uniqueItems``, ``$id`` …) goes to jsonschema. The two must agree on
every instance: ``tests/toolsets/test_validation_properties.py`` checks that
differentially, with jsonschema as the oracle.

Run only on schemas that passed ``check_schema`` (``_validate`` does that
first), so keyword values have the shapes the meta-schema requires.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import TypeGuard

from agentik._input import InputError, decimal_int
from agentik._json import JsonValue
from agentik.toolsets._failure import (
    BOUND_SYMBOLS,
    LENGTH_WORDS,
    ONE_OF_MANY,
    Check,
    Failure,
    SchemaError,
    bound_message,
    enum_message,
    length_message,
    merge,
    not_accepted_message,
    pattern_message,
    type_message,
)

_VALIDATING = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "oneOf",
        "allOf",
        "pattern",
        "$ref",
        *BOUND_SYMBOLS,
        *LENGTH_WORDS,
    }
)
"""Keywords these closures implement exactly (``items`` only in its single-schema form)."""
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
    | {"$comment", "format"}  # format is an annotation: never asserted (see _validate)
)
_CONTAINERS = ("$defs", "definitions")
"""Where ``$ref`` targets live; not keywords that validate anything themselves."""


def applies(schema: JsonValue, *, ref_siblings_apply: bool) -> bool:
    """Whether these closures check ``schema`` exactly as the spec does.

    ``ref_siblings_apply`` is False for draft 6/7, where keywords beside a
    ``$ref`` are ignored: such a schema is left to jsonschema.
    """
    stack: list[tuple[JsonValue, bool]] = [(schema, True)]
    while stack:
        node, is_root = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            return False
        for key in node:
            known = key in _VALIDATING or key in _ANNOTATIONS or key in _CONTAINERS
            if not (known or (is_root and key == "$schema")):
                return False
        ref = node.get("$ref")
        if ref is not None:
            if not _plain_pointer(ref) or not isinstance(resolve_pointer(schema, ref), dict | bool):
                return False
            if not ref_siblings_apply and any(k in _VALIDATING for k in node if k != "$ref"):
                return False
        for key in ("properties", *_CONTAINERS):
            children = node.get(key)
            if children is not None:
                if not isinstance(children, dict):
                    return False
                stack.extend((child, False) for child in children.values())
        for key in ("additionalProperties", "items"):
            if key in node:
                stack.append((node[key], False))  # a list here (tuple items) fails above
        for key in ("anyOf", "oneOf", "allOf"):
            branches = node.get(key)
            if isinstance(branches, list):
                stack.extend((branch, False) for branch in branches)
    return True


def _plain_pointer(ref: JsonValue) -> TypeGuard[str]:
    # "#" or "#/a/b"; percent-escapes are left to jsonschema, which decodes them.
    return isinstance(ref, str) and (ref == "#" or ref.startswith("#/")) and "%" not in ref


def resolve_pointer(root: JsonValue, ref: str) -> JsonValue:
    node = root
    for raw in ref[1:].split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and (index := _index(part, len(node))) is not None:
            node = node[index]
        else:
            raise SchemaError(f"$ref {ref!r} leads nowhere in the schema")
    return node


def _index(part: str, length: int) -> int | None:
    """An array index of a JSON pointer: ASCII digits only (``str.isdigit`` also
    takes ``'²'``, which ``int`` then refuses, and ``'١'``, which it reads as 1)."""
    try:
        return decimal_int(part, "an array index", maximum=length - 1)
    except InputError:
        return None


def compile_closures(schema: JsonValue) -> Check:
    """Compile a schema for which ``applies`` holds into a check."""
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
        checks.extend(_leaf_checks(schema))
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            checks.append(self._object(schema))
        if "items" in schema:
            checks.append(self._items(self.compile(schema["items"])))
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                checks.append(self._any_of([self.compile(b) for b in branches], key == "oneOf"))
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            checks.extend(self.compile(b) for b in all_of)
        return _all(checks)

    def _ref(self, ref: str) -> Check:
        compiled = self._refs.get(ref)
        if compiled is not None:
            return compiled
        target = resolve_pointer(self._root, ref)
        slot: list[Check] = []

        def deferred(value: JsonValue) -> Failure | None:
            return slot[0](value)

        # Registered before compiling the target, so a recursive schema terminates.
        self._refs[ref] = deferred
        slot.append(self.compile(target))
        return deferred

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
        refused = not_accepted_message(list(compiled), [])

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
                        return Failure([name], refused)
                    sub = extra
                failure = sub(item)
                if failure is not None:
                    failure.path.append(name)
                    return failure
            return None

        return check

    def _items(self, each: Check) -> Check:
        def check(value: JsonValue) -> Failure | None:
            if not isinstance(value, list):
                return None
            for position, item in enumerate(value):
                failure = each(item)
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
                return Failure([], ONE_OF_MANY)
            return merge(failures, [])

        return check


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


def _is_number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: JsonValue) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPE_TESTS: dict[str, Callable[[JsonValue], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1, at any depth."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(item, b[key]) for key, item in a.items())
        )
    if isinstance(b, list | dict):
        return False
    return a == b


def _leaf_checks(schema: dict[str, JsonValue]) -> list[Check]:
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        checks.append(_type_check([kind] if isinstance(kind, str) else kind))
    options = schema.get("enum")
    if isinstance(options, list):
        checks.append(_enum_check(options))
    if "const" in schema:
        checks.append(_enum_check([schema["const"]]))
    for keyword in BOUND_SYMBOLS:
        if keyword in schema:
            checks.append(_bound_check(keyword, schema[keyword]))
    for keyword in LENGTH_WORDS:
        if keyword in schema:
            checks.append(_length_check(keyword, schema[keyword]))
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        checks.append(_pattern_check(pattern))
    return checks


def _type_check(kind: JsonValue) -> Check:
    names = [n for n in kind if isinstance(n, str)] if isinstance(kind, list) else []
    tests = tuple(_TYPE_TESTS[n] for n in names if n in _TYPE_TESTS)

    def check(value: JsonValue) -> Failure | None:
        for test in tests:
            if test(value):
                return None
        return Failure([], type_message(names, value))

    return check


def _enum_check(options: list[JsonValue]) -> Check:
    if all(isinstance(o, str) for o in options):
        strings = frozenset(o for o in options if isinstance(o, str))

        def check_strings(value: JsonValue) -> Failure | None:
            if isinstance(value, str) and value in strings:
                return None
            return Failure([], enum_message(options, value))

        return check_strings

    def check(value: JsonValue) -> Failure | None:
        if any(json_equal(value, option) for option in options):
            return None
        return Failure([], enum_message(options, value))

    return check


_HOLDS: dict[str, Callable[[float, float], bool]] = {
    "minimum": operator.ge,
    "maximum": operator.le,
    "exclusiveMinimum": operator.gt,
    "exclusiveMaximum": operator.lt,
}


def _bound_check(keyword: str, bound: JsonValue) -> Check:
    if not _is_number(bound) or not isinstance(bound, int | float):
        raise SchemaError(f"{keyword} must be a number, got {bound!r}")
    # Compared as given: int against float is exact in Python, a float() cast is not
    # (2**53 + 1 would round down and let 2**53 pass a minimum of 2**53 + 1).
    holds = _HOLDS[keyword]

    def check(value: JsonValue) -> Failure | None:
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not holds(value, bound)
        ):
            return Failure([], bound_message(keyword, bound, value))
        return None

    return check


_CONTAINER_OF = {
    "minLength": str,
    "maxLength": str,
    "minItems": list,
    "maxItems": list,
    "minProperties": dict,
    "maxProperties": dict,
}


def _length_check(keyword: str, limit: JsonValue) -> Check:
    # The meta-schema's "non-negative integer" accepts 2.0 as well as 2.
    if not _is_integer(limit) or not isinstance(limit, int | float):
        raise SchemaError(f"{keyword} must be a non-negative integer, got {limit!r}")
    container = _CONTAINER_OF[keyword]
    at_least = keyword.startswith("min")

    def check(value: JsonValue) -> Failure | None:
        if isinstance(value, container) and isinstance(value, str | list | dict):
            size = len(value)
            if (size < limit) if at_least else (size > limit):
                return Failure([], length_message(keyword, limit, size))
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
            return Failure([], pattern_message(pattern, value))
        return None

    return check
