"""OpenAI's ``response_format`` for a typed turn: the request's output schema
as Structured Outputs, strict where the schema allows it. Pure.

Strict mode takes a subset of JSON Schema: the root an object, every object
closed (``additionalProperties: false``) with every property required, and
only the keywords below. A schema outside it is sent with ``strict: false``:
it still guides the model, and the agent validates the answer either way.
"""

from __future__ import annotations

import re
from typing import Final

from agentik._json import JsonObject, JsonValue

_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

_STRICT_KEYWORDS: Final = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum",
        "const", "anyOf", "$ref", "$defs", "description", "title", "pattern",
        "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip


def response_format(schema: JsonObject) -> JsonObject:
    """The ``response_format`` body value asking for JSON matching ``schema``;
    named by its ``title`` when that is a valid name, else ``answer``."""
    title = schema.get("title")
    name = title if isinstance(title, str) and _NAME.fullmatch(title) else "answer"
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": schema, "strict": strict_allowed(schema)},
    }


def strict_allowed(schema: JsonObject) -> bool:
    """Whether OpenAI's strict structured outputs accept ``schema`` as it is."""
    return schema.get("type") == "object" and _strict(schema)


def _strict(schema: JsonValue) -> bool:
    if not isinstance(schema, dict) or not schema.keys() <= _STRICT_KEYWORDS:
        return False
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if not isinstance(properties, dict) or schema.get("additionalProperties") is not False:
            return False
        required = schema.get("required", [])
        if not isinstance(required, list) or set(map(str, required)) != set(properties):
            return False
        if not all(_strict(sub) for sub in properties.values()):
            return False
    items = schema.get("items")
    if items is not None and not _strict(items):
        return False
    any_of = schema.get("anyOf")
    if any_of is not None and not (isinstance(any_of, list) and all(map(_strict, any_of))):
        return False
    defs = schema.get("$defs")
    return defs is None or (isinstance(defs, dict) and all(map(_strict, defs.values())))
