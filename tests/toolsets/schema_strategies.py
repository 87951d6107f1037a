"""Hypothesis strategies for JSON Schemas and JSON values that exercise them.

Schemas draw from Draft 2020-12's validation keywords; values draw from the
same small vocabulary (the keys ``a``, ``b``, ``x-1``; strings the patterns
test; numbers on both sides of the bounds), so that most values meet most
keywords and land on both sides of them. ``$ref`` only points to ``$defs``
entries defined after the referring one, so no reference loops forever.
"""

from __future__ import annotations

import enum
import inspect
import typing

import attrs
from hypothesis import reject
from hypothesis import strategies as st

from agentik import ToolError
from agentik._json import JsonValue
from agentik.toolsets import NamedTool, tool

KEYS = ("a", "b", "x-1", "c")
PATTERNS = ("^a", "b$", "^x-", "[0-9]", "^$", "a+")
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
DIALECTS = (
    None,
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
)

# 2**53 and 2**53 + 1 are one float apart from each other: a bound cast to float confuses them.
numbers = st.sampled_from([0, 1, 2, 3, -1, 10, 0.5, 1.5, 2.0, -2.5, 2**53, 2**53 + 1]) | st.floats(
    -20, 20, allow_nan=False, allow_infinity=False
)
strings = st.sampled_from(["", "a", "b", "ab", "ba", "x-1", "A", "aaa", "7"]) | st.text(
    "abx-1", max_size=4
)
scalars = st.none() | st.booleans() | numbers | st.integers(-3, 12) | strings
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | strings, inner, max_size=4)
    ),
    max_leaves=10,
)
"""Any JSON value, from the vocabulary the generated schemas test."""

counts = st.integers(0, 3) | st.sampled_from([1.0, 2.0])  # 2.0 is a valid count (an integer)

# Keywords with a value that is not a schema: name -> strategy for its value.
_LEAF_KEYWORDS: dict[str, st.SearchStrategy[JsonValue]] = {
    "type": st.sampled_from(TYPES)
    | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
    "enum": st.lists(scalars | st.lists(scalars, max_size=2), min_size=1, max_size=3),
    "const": scalars
    | st.lists(scalars, max_size=2)
    | st.dictionaries(st.sampled_from(KEYS), scalars, max_size=2),
    "multipleOf": st.sampled_from([2, 3, 0.5, 1.5, 0.25]),
    "minimum": numbers,
    "maximum": numbers,
    "exclusiveMinimum": numbers,
    "exclusiveMaximum": numbers,
    "minLength": counts,
    "maxLength": counts,
    "minItems": counts,
    "maxItems": counts,
    "minProperties": counts,
    "maxProperties": counts,
    "pattern": st.sampled_from(PATTERNS),
    "uniqueItems": st.booleans(),
    "required": st.lists(st.sampled_from(KEYS), max_size=3, unique=True),
    "dependentRequired": st.dictionaries(
        st.sampled_from(KEYS), st.lists(st.sampled_from(KEYS), max_size=2, unique=True), max_size=2
    ),
    "title": st.just("a title"),
    "description": st.just("what it is"),
    "default": scalars,
    "format": st.sampled_from(["date", "email", "uri"]),
}
_SCHEMA_KEYWORDS = (
    "properties",
    "patternProperties",
    "additionalProperties",
    "dependentSchemas",
    "items",
    "prefixItems",
    "not",
    "anyOf",
    "oneOf",
    "allOf",
    "if",
    "then",
    "else",
    "contains",
)
FAST_KEYWORDS = frozenset(
    {"type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
    | {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
    | {"pattern", "required", "title", "description", "default", "format"}
    | {"properties", "additionalProperties", "items", "anyOf", "oneOf", "allOf", "$ref"}
)
"""The keywords the closures engine implements: a schema of only these is theirs."""
ALL_KEYWORDS = frozenset({*_LEAF_KEYWORDS, *_SCHEMA_KEYWORDS, "$ref"})


def _schema(
    draw: st.DrawFn, depth: int, refs: tuple[str, ...], keywords: frozenset[str]
) -> JsonValue:
    """One (sub)schema with a few keywords; booleans now and then."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.booleans())
    usable = sorted(k for k in keywords if k != "$ref" or refs)
    if depth <= 0:
        usable = [k for k in usable if k in _LEAF_KEYWORDS or k == "$ref"]
    chosen = draw(st.lists(st.sampled_from(usable), max_size=4, unique=True))
    node: dict[str, JsonValue] = {}

    def sub() -> JsonValue:
        return _schema(draw, depth - 1, refs, keywords)

    for key in chosen:
        if key in _LEAF_KEYWORDS:
            node[key] = draw(_LEAF_KEYWORDS[key])
        elif key == "$ref":
            node[key] = f"#/$defs/{draw(st.sampled_from(refs))}"
        elif key in ("properties", "dependentSchemas"):
            names = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
            node[key] = {name: sub() for name in names}
        elif key == "patternProperties":
            patterns = draw(
                st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True)
            )
            node[key] = {pattern: sub() for pattern in patterns}
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            node[key] = [sub() for _ in range(draw(st.integers(1, 3)))]
        else:
            node[key] = sub()
    return node


@st.composite
def schemas(
    draw: st.DrawFn, keywords: frozenset[str] = ALL_KEYWORDS, dialects: bool = True
) -> JsonValue:
    """A whole schema: ``$defs`` (referring only forwards), a body, sometimes ``$schema``."""
    names = [f"d{i}" for i in range(draw(st.integers(0, 2)))] if "$ref" in keywords else []
    defs = {name: _schema(draw, 1, tuple(names[i + 1 :]), keywords) for i, name in enumerate(names)}
    root = _schema(draw, 2, tuple(names), keywords)
    if not isinstance(root, dict):
        return root
    if defs:
        root["$defs"] = dict(defs)
    dialect = draw(st.sampled_from(DIALECTS)) if dialects else None
    if dialect is not None:
        root["$schema"] = dialect
    return root


# -- what @tool generates ------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


_LEAF_HINTS: list[object] = [
    str,
    int,
    float,
    bool,
    typing.Literal["a", "b"],
    typing.Literal[1, 2, 3],
    typing.Literal["x", 1, None],
    Color,
    Level,
]


@st.composite
def _attrs_class(draw: st.DrawFn, inner: st.SearchStrategy[object]) -> object:
    names = draw(
        st.lists(st.sampled_from(["a", "b", "d", "e"]), min_size=1, max_size=3, unique=True)
    )
    required: dict[str, object] = {}
    optional: dict[str, object] = {}
    for name in names:
        hint = draw(inner)
        if draw(st.booleans()):
            required[name] = attrs.field(type=hint)
        else:
            optional[name] = attrs.field(type=_nullable(hint), default=None)
    return attrs.make_class("Record", {**required, **optional})  # attrs: required ones first


def _nullable(hint: object) -> object:
    return typing.Optional[hint]  # noqa: UP045


hints: st.SearchStrategy[object] = st.recursive(
    st.sampled_from(_LEAF_HINTS),
    lambda inner: (
        st.builds(lambda h: list[h], inner)  # type: ignore[valid-type]
        | st.builds(lambda h: tuple[h, ...], inner)  # type: ignore[valid-type]
        | st.builds(lambda h: dict[str, h], inner)  # type: ignore[valid-type]
        | st.builds(_nullable, inner)
        | st.sampled_from([str | int, int | list[str], str | bool | None, dict[str, int] | str])
        | _attrs_class(inner)
    ),
    max_leaves=5,
)
"""Type hints ``@tool`` turns into schemas: primitives, containers, unions, enums, attrs classes."""


@st.composite
def generated_tools(draw: st.DrawFn) -> NamedTool:
    """A ``@tool`` built from random typed parameters, some with defaults."""
    names = draw(
        st.lists(
            st.sampled_from(["city", "days", "unit", "tags", "place"]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    parameters = []
    for name in names:
        hint = draw(hints)
        default: object = inspect.Parameter.empty
        if draw(st.booleans()):
            hint, default = _nullable(hint), None
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
        )

    async def generated(**kwargs: object) -> str:
        return "ok"

    generated.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    generated.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": str}
    generated.__doc__ = "A generated tool."
    try:
        return tool(generated)
    except ToolError:  # a union @tool refuses, such as Literal["x", 1] | None
        reject()


def valid_instances(schema: JsonValue) -> st.SearchStrategy[JsonValue]:
    """Values a ``@tool``-shaped schema accepts (tests confirm each with jsonschema).

    hypothesis-jsonschema would do this for any schema, but its latest release
    (0.23.1) uses Hypothesis internals that Hypothesis 6.170 no longer has, and
    fails on every object schema; ``@tool`` schemas need only this much.
    """
    if not isinstance(schema, dict) or not schema.keys() - {"description", "default"}:
        return json_values
    enum_values = schema.get("enum")
    if isinstance(enum_values, list):
        return st.sampled_from(enum_values)
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        return st.one_of([valid_instances(branch) for branch in branches])
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    return st.one_of([_of_type(k, schema) for k in kinds if isinstance(k, str)])


def _of_type(kind: str, schema: dict[str, JsonValue]) -> st.SearchStrategy[JsonValue]:
    if kind == "object":
        return _objects(schema)
    if kind == "array":
        return st.lists(valid_instances(schema.get("items", True)), max_size=3)
    return {
        "string": st.text(max_size=5),
        "integer": st.integers(-(2**60), 2**60) | st.integers(-100, 100).map(float),
        "number": st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
        "boolean": st.booleans(),
        "null": st.none(),
    }[kind]


def _objects(schema: dict[str, JsonValue]) -> st.SearchStrategy[JsonValue]:
    raw = schema.get("properties")
    properties = raw if isinstance(raw, dict) else {}
    raw_required = schema.get("required")
    required = set(raw_required) if isinstance(raw_required, list) else set()
    fixed = st.fixed_dictionaries(
        {name: valid_instances(sub) for name, sub in properties.items() if name in required},
        optional={
            name: valid_instances(sub) for name, sub in properties.items() if name not in required
        },
    )
    extra = schema.get("additionalProperties", True)
    if extra is False:
        return fixed
    more = st.dictionaries(
        st.text(max_size=3).filter(lambda key: key not in properties),
        valid_instances(extra),
        max_size=2,
    )
    return st.builds(lambda a, b: {**b, **a}, fixed, more)
