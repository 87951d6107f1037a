"""Python type hints -> JSON Schema, and validated JSON -> typed Python values.

Both come from one walk over the hint, so the schema the model sees and the
conversion the tool gets can never disagree. Supported: ``str``, ``int``,
``float``, ``bool``, ``None``, ``list[T]`` / ``tuple[T, ...]`` /
``Sequence[T]``, ``dict[str, T]``, ``T | None`` and unions of these,
``Literal[...]``, ``enum.Enum`` subclasses, attrs classes, dataclasses and
``TypedDict``s (nested objects), and ``Annotated[T, "description"]``.
Anything else is refused when the tool is defined, never when it is called.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from collections.abc import Callable

import attrs

from agentik._json import JsonObject, JsonValue

Convert = Callable[[JsonValue], object]
"""Turns an already validated JSON value into the Python value the hint names."""


class UnsupportedType(TypeError):
    """A type hint ``@tool`` cannot describe in JSON Schema."""


def _same(value: JsonValue) -> object:
    return value


def _to_int(value: JsonValue) -> object:
    return int(value) if isinstance(value, float) else value


def _to_float(value: JsonValue) -> object:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


_PRIMITIVES: dict[object, tuple[str, Convert]] = {
    str: ("string", _same),
    bool: ("boolean", _same),
    int: ("integer", _to_int),
    float: ("number", _to_float),
    type(None): ("null", _same),
}

_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.Iterable)


def schema_and_converter(hint: object) -> tuple[JsonObject, Convert]:
    """The JSON Schema for ``hint`` and the converter into its Python type."""
    return _Walker().walk(hint)


def schema_for_type(hint: object) -> JsonObject:
    """The JSON Schema of values of ``hint`` (what ``@tool`` writes for a
    parameter); raises ``TypeError`` naming a hint it cannot describe."""
    return _Walker().walk(hint)[0]


class _Walker:
    def __init__(self) -> None:
        self._open: set[type] = set()  # attrs classes being described, to refuse recursion

    def walk(self, hint: object) -> tuple[JsonObject, Convert]:
        if hint is None:
            hint = type(None)
        primitive = _PRIMITIVES.get(hint)
        if primitive is not None:
            return {"type": primitive[0]}, primitive[1]
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            schema, convert = self.walk(args[0])
            notes = [a for a in args[1:] if isinstance(a, str)]
            if notes:
                schema = {**schema, "description": notes[0]}
            return schema, convert
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin is typing.Literal:
            return _literal(args)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return _enum(hint)
        if isinstance(hint, type) and attrs.has(hint):
            return self._attrs_class(hint)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._dataclass(hint)
        if isinstance(hint, type) and typing.is_typeddict(hint):
            return self._typeddict(hint)
        if origin in _SEQUENCES or hint in (list, tuple):
            return self._sequence(hint, origin, args)
        if origin is dict or hint is dict:
            return self._mapping(hint, args)
        raise UnsupportedType(f"unsupported type {hint!r}")

    def _union(self, args: tuple[object, ...]) -> tuple[JsonObject, Convert]:
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        walked = [self.walk(m) for m in members]
        if len(walked) == 1 and not nullable:
            return walked[0]
        # Which converter applies is decided by the JSON type of the value.
        by_type: list[tuple[str, Convert]] = []
        for member_schema, member_convert in walked:
            kind = member_schema.get("type")
            if not isinstance(kind, str):
                raise UnsupportedType(
                    f"union member {member_schema!r} has no single JSON type; "
                    "expected members of distinct JSON types"
                )
            seen = {k for k, _ in by_type}
            if kind in seen or {kind, *seen} >= {"integer", "number"}:
                raise UnsupportedType(f"union {args!r} has two members of JSON type {kind!r}")
            by_type.append((kind, member_convert))
        schemas: list[JsonValue] = [schema for schema, _ in walked]
        if nullable:
            schemas.append({"type": "null"})
        if all(set(s) == {"type"} for s in schemas if isinstance(s, dict)):
            union_schema: JsonObject = {"type": [s["type"] for s in schemas if isinstance(s, dict)]}
        else:
            union_schema = {"anyOf": schemas}
        converters = dict(by_type)
        if "number" in converters:
            converters["integer"] = converters["number"]  # JSON 3 is a number too

        def convert(value: JsonValue) -> object:
            if value is None:
                return None
            return converters.get(_json_type(value), _same)(value)

        return union_schema, convert

    def _sequence(
        self, hint: object, origin: object, args: tuple[object, ...]
    ) -> tuple[JsonObject, Convert]:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise UnsupportedType(f"fixed-size tuple {hint!r}; expected tuple[T, ...] or list[T]")
        if not args:
            raise UnsupportedType(f"bare {hint!r}; expected an item type, as in list[str]")
        item_schema, item_convert = self.walk(args[0])
        make = tuple if origin is tuple else list

        def convert(value: JsonValue) -> object:
            assert isinstance(value, list)
            return make(item_convert(item) for item in value)

        return {"type": "array", "items": item_schema}, convert

    def _mapping(self, hint: object, args: tuple[object, ...]) -> tuple[JsonObject, Convert]:
        if not args:
            return {"type": "object"}, _same
        if args[0] is not str:
            raise UnsupportedType(f"mapping {hint!r} has non-string keys; expected dict[str, T]")
        value_schema, value_convert = self.walk(args[1])

        def convert(value: JsonValue) -> object:
            assert isinstance(value, dict)
            return {key: value_convert(item) for key, item in value.items()}

        return {"type": "object", "additionalProperties": value_schema}, convert

    def _attrs_class(self, cls: type) -> tuple[JsonObject, Convert]:
        def fields(hints: dict[str, object]) -> list[_Field]:
            return [
                _Field(
                    field.alias or field.name,
                    hints.get(field.name, field.type),
                    field.default is attrs.NOTHING,
                    field.metadata.get("description"),
                )
                for field in attrs.fields(cls)
                if field.init
            ]

        return self._object(cls, "attrs class", fields, make=lambda values: cls(**values))

    def _dataclass(self, cls: type) -> tuple[JsonObject, Convert]:
        def fields(hints: dict[str, object]) -> list[_Field]:
            return [
                _Field(
                    field.name,
                    hints.get(field.name, field.type),
                    field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING,
                    field.metadata.get("description"),
                )
                for field in dataclasses.fields(cls)
                if field.init
            ]

        return self._object(cls, "dataclass", fields, make=lambda values: cls(**values))

    def _typeddict(self, cls: type) -> tuple[JsonObject, Convert]:
        required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())

        def fields(hints: dict[str, object]) -> list[_Field]:
            return [_Field(key, hint, key in required, None) for key, hint in hints.items()]

        return self._object(cls, "TypedDict", fields, make=dict)

    def _object(
        self,
        cls: type,
        kind: str,
        fields_of: Callable[[dict[str, object]], list[_Field]],
        make: Callable[[dict[str, object]], object],
    ) -> tuple[JsonObject, Convert]:
        """An object schema for a class with named fields (attrs, dataclass, TypedDict)."""
        if cls in self._open:
            raise UnsupportedType(f"recursive {kind} {cls.__qualname__}")
        self._open.add(cls)
        try:
            try:
                # The class itself is in scope, so a self-reference resolves (and is refused).
                hints = typing.get_type_hints(cls, localns={cls.__name__: cls}, include_extras=True)
            except NameError as error:
                raise UnsupportedType(
                    f"{kind} {cls.__qualname__} with an unresolvable hint: {error}"
                ) from error
            properties: JsonObject = {}
            required: list[JsonValue] = []
            converters: dict[str, Convert] = {}
            for field in fields_of(hints):
                field_schema, field_convert = self.walk(field.hint)
                if isinstance(field.description, str):
                    field_schema = {**field_schema, "description": field.description}
                properties[field.key] = field_schema
                if field.required:
                    required.append(field.key)
                converters[field.key] = field_convert
        finally:
            self._open.discard(cls)
        schema_out: JsonObject = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

        def convert(value: JsonValue) -> object:
            assert isinstance(value, dict)
            return make({key: converters[key](item) for key, item in value.items()})

        return schema_out, convert


@attrs.frozen
class _Field:
    key: str
    hint: object
    required: bool
    description: object


def _json_type(value: JsonValue) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _literal(args: tuple[object, ...]) -> tuple[JsonObject, Convert]:
    values: list[JsonValue] = []
    for arg in args:
        if arg is not None and not isinstance(arg, str | int | bool):
            raise UnsupportedType(f"Literal value {arg!r}; expected str, int, bool or None")
        values.append(arg)
    kinds = {_json_type(v) if v is not None else "null" for v in values}
    schema: JsonObject = {"enum": values}
    if len(kinds) == 1:
        schema = {"type": kinds.pop(), "enum": values}
    return schema, _same


def _enum(cls: type[enum.Enum]) -> tuple[JsonObject, Convert]:
    values: list[JsonValue] = []
    for member in cls:
        if not isinstance(member.value, str | int) or isinstance(member.value, bool):
            raise UnsupportedType(
                f"enum {cls.__qualname__} value {member.value!r}; expected str or int"
            )
        values.append(member.value)
    kinds = {_json_type(v) for v in values}
    schema: JsonObject = {"enum": values}
    if len(kinds) == 1:
        schema = {"type": kinds.pop(), "enum": values}
    return schema, lambda value: cls(value)
