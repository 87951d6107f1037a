"""jsonschema's validation errors, told in agentik's words. Pure.

jsonschema reports every violation with its keyword, the keyword's value, the
instance and the path; this module picks the most relevant one
(``jsonschema.exceptions.relevance``: the shallowest, non-``anyOf`` first)
and phrases it the way the closures do (``_failure``), so the model reads
``field 'n' must be a multiple of 5, got a number 7`` whichever engine ran.
A keyword without a phrase of its own keeps jsonschema's message.

One workaround: jsonschema 4.26 drops the path and schema-path steps when it
descends into a ``false`` subschema (``properties: {"a": false}`` reports
the object, not ``a``; ``anyOf: [false, ...]`` loses the branch), so
``for_reporting`` gives jsonschema the same schema with each such ``false``
spelled ``{"not": {}}``, which refuses the same values and keeps the path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import cast

from jsonschema.exceptions import ValidationError, relevance

from agentik._json import JsonValue
from agentik.toolsets._failure import (
    BOUND_SYMBOLS,
    LENGTH_WORDS,
    ONE_OF_MANY,
    Failure,
    bound_message,
    describe,
    enum_message,
    length_message,
    merge,
    not_accepted_message,
    pattern_message,
    short_json,
    type_message,
)

_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_VALUES = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_REPORTED_DIRECTLY = ("additionalProperties", "unevaluatedProperties", "additionalItems")
"""Keywords whose ``false`` jsonschema reports itself, naming the extra fields or items."""


def for_reporting(schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``schema`` with each ``false`` that would lose its path spelled ``{"not": {}}``."""
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        children = schema.get(key)
        if isinstance(children, dict):
            out[key] = {name: _child(key, child) for name, child in children.items()}
    for key in _SCHEMA_LISTS:
        branches = schema.get(key)
        if isinstance(branches, list):
            out[key] = [_child(key, child) for child in branches]
    for key in _SCHEMA_VALUES:
        child = schema.get(key)
        if isinstance(child, dict) or child is False:
            out[key] = _child(key, child)
    return out


def _child(keyword: str, schema: JsonValue) -> JsonValue:
    if schema is False and keyword not in _REPORTED_DIRECTLY:
        return {"not": {}}
    return for_reporting(schema) if isinstance(schema, dict) else schema


def failure_of(errors: Iterable[ValidationError]) -> Failure:
    """The failure to report for a value with at least one error."""
    return _translate(max(errors, key=relevance))


def _translate(error: ValidationError) -> Failure:
    base: list[str | int] = list(reversed(error.absolute_path))
    # Both come from the schema and the checked value, so they are JSON.
    value = cast("JsonValue", error.validator_value)
    instance = cast("JsonValue", error.instance)
    keyword = error.validator
    if not isinstance(keyword, str):  # the false schema (jsonschema sets no keyword)
        return Failure(base, "is not allowed")
    if keyword in ("anyOf", "oneOf"):
        return _branches(error, base)
    if keyword in ("required", "dependentRequired", "dependencies", "additionalProperties"):
        field = _missing_or_extra(keyword, value, instance, error.schema)
        if field is not None:
            return Failure([field[0], *base], field[1])
    message = _message(keyword, value, instance, error.schema)
    if message is None:
        message = f"is invalid: {error.message}"
    if "propertyNames" in error.absolute_schema_path:  # the value checked was a key
        message = f"has a field name that is not accepted: it {message}"
    return Failure(base, message)


def _branches(error: ValidationError, base: list[str | int]) -> Failure:
    if not error.context:
        return Failure(base, ONE_OF_MANY)  # oneOf: more than one branch matched
    by_branch: dict[object, list[ValidationError]] = {}
    for sub in error.context:
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else None
        by_branch.setdefault(branch, []).append(sub)
    return merge([_translate(max(subs, key=relevance)) for subs in by_branch.values()], base)


def _missing_or_extra(
    keyword: str, value: JsonValue, instance: JsonValue, schema: object
) -> tuple[str, str] | None:
    """The field a required/dependency/additionalProperties error is about, and the phrase."""
    if not isinstance(instance, dict):
        return None
    if keyword == "required" and isinstance(value, list):
        for name in value:
            if isinstance(name, str) and name not in instance:
                return name, "is required"
    if keyword in ("dependentRequired", "dependencies") and isinstance(value, dict):
        for present, needed in value.items():
            if present in instance and isinstance(needed, list):
                for name in needed:
                    if isinstance(name, str) and name not in instance:
                        return name, f"is required when {present!r} is present"
    if keyword == "additionalProperties" and value is False and isinstance(schema, dict):
        properties = schema.get("properties")
        names = list(properties) if isinstance(properties, dict) else []
        raw_patterns = schema.get("patternProperties")
        patterns = list(raw_patterns) if isinstance(raw_patterns, dict) else []
        for key in instance:
            if key not in names and not any(re.search(p, key) for p in patterns):
                return key, not_accepted_message(names, patterns)
    return None


def _message(keyword: str, value: JsonValue, instance: JsonValue, schema: object) -> str | None:
    """The phrase for one keyword's violation, or None to keep jsonschema's message."""
    if keyword == "type":
        names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        return type_message([n for n in names if isinstance(n, str)], instance)
    if keyword == "enum" and isinstance(value, list):
        return enum_message(value, instance)
    if keyword == "const":
        return enum_message([value], instance)
    if keyword in BOUND_SYMBOLS:
        return bound_message(_draft4_bound(keyword, schema), value, instance)
    if keyword in LENGTH_WORDS and isinstance(instance, str | list | dict):
        return length_message(keyword, value, len(instance))
    if keyword == "pattern" and isinstance(value, str):
        return pattern_message(value, instance)
    if keyword == "multipleOf":
        return f"must be a multiple of {value}, got {describe(instance)}"
    if keyword == "uniqueItems":
        return f"must have unique items, got {describe(instance)}"
    if keyword == "not" and value == {}:
        return "is not allowed"
    if keyword == "not":
        return f"must not match the schema {short_json(value, 60)}, got {describe(instance)}"
    if keyword == "additionalItems" and value is False and isinstance(instance, list):
        prefix = schema.get("items") if isinstance(schema, dict) else None
        allowed = len(prefix) if isinstance(prefix, list) else 0
        return length_message("maxItems", allowed, len(instance))
    if keyword == "contains" and isinstance(schema, dict) and "maxContains" not in schema:
        least = schema.get("minContains", 1)
        some = "an item" if least == 1 else f"at least {least} items"
        return f"must contain {some} matching the schema {short_json(value, 60)}"
    return None


def _draft4_bound(keyword: str, schema: object) -> str:
    # Draft 4 spells "> 0" as minimum: 0 with exclusiveMinimum: true.
    if keyword in ("minimum", "maximum") and isinstance(schema, dict):
        exclusive = "exclusive" + keyword[0].upper() + keyword[1:]
        if schema.get(exclusive) is True:
            return exclusive
    return keyword
