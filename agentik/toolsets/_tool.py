"""``@tool``: a ``NamedTool`` from a typed async function.

The name is the function's, the description its docstring's summary, the
parameter descriptions come from a Google-style ``Args:`` section, and the
JSON Schema from the type hints (see ``_types``). Everything that can be wrong
with a definition is refused at decoration with ``ToolError``, so a call can
only fail on its arguments: the handler validates them against the schema,
converts them to the typed values (attrs classes, enums …) and calls the
function, raising ``ToolError`` that names the bad field.
"""

from __future__ import annotations

import enum
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import overload

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.toolsets._arguments import format_failure, remember_validator
from agentik.toolsets._contribution import TOOL_NAME_PATTERN
from agentik.toolsets._named_tool import NamedTool
from agentik.toolsets._types import Convert, UnsupportedType, schema_and_converter
from agentik.toolsets._validate import SchemaError, compile_schema

ToolFunction = Callable[..., Awaitable[str]]
"""An async function returning the result text, with typed keyword parameters."""

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@overload
def tool(function: ToolFunction, /) -> NamedTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    sequential: bool = False,
) -> Callable[[ToolFunction], NamedTool]: ...
def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
    sequential: bool = False,
) -> NamedTool | Callable[[ToolFunction], NamedTool]:
    """Build a ``NamedTool`` from an async function; use as ``@tool`` or
    ``@tool(name=..., requires_approval=True, idempotent=True, sequential=True)``
    (see ``NamedTool`` for the flags)."""

    def build(fn: ToolFunction) -> NamedTool:
        return _build(fn, name, description, requires_approval, idempotent, sequential)

    return build if function is None else build(function)


def _build(
    fn: ToolFunction,
    name: str | None,
    description: str | None,
    requires_approval: bool = False,
    idempotent: bool = False,
    sequential: bool = False,
) -> NamedTool:
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if TOOL_NAME_PATTERN.fullmatch(tool_name) is None:
        raise ToolError(
            f"tool name {tool_name!r} is invalid; expected 1-64 letters, digits, '_' or '-'"
        )
    if not inspect.iscoroutinefunction(fn):
        raise ToolError(f"tool {tool_name!r} must be an async function (async def)")
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    text = description if description is not None else summary
    if not text.strip():
        raise ToolError(
            f"tool {tool_name!r} needs a description; add a docstring or pass description="
        )
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as error:
        raise ToolError(
            f"tool {tool_name!r} has type hints that cannot be resolved: {error}"
        ) from error
    if hints.get("return", str) is not str:
        raise ToolError(f"tool {tool_name!r} must return str, not {hints['return']!r}")
    parameters, converters = _parameters(tool_name, fn, hints, arg_docs)
    try:
        check = compile_schema(parameters, generated=True)
    except SchemaError as error:  # a bug in _types, not in the user's function
        raise ToolError(f"tool {tool_name!r} got a schema agentik cannot check: {error}") from error

    async def handler(arguments: JsonObject) -> str:
        failure = check(arguments)
        if failure is not None:
            raise ToolError(format_failure(tool_name, failure))
        result = await fn(**{key: converters[key](value) for key, value in arguments.items()})
        if not isinstance(result, str):
            raise ToolError(f"tool {tool_name!r} returned {type(result).__name__}; expected str")
        return result

    named = NamedTool(
        tool_name,
        text.strip(),
        parameters,
        handler,
        requires_approval=requires_approval,
        idempotent=idempotent,
        sequential=sequential,
    )
    remember_validator(named, check)
    return named


def _parameters(
    tool_name: str,
    fn: ToolFunction,
    hints: dict[str, object],
    arg_docs: dict[str, str],
) -> tuple[JsonObject, dict[str, Convert]]:
    properties: JsonObject = {}
    required: list[JsonValue] = []
    converters: dict[str, Convert] = {}
    for parameter in inspect.signature(fn).parameters.values():
        label = f"parameter {parameter.name!r} of tool {tool_name!r}"
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise ToolError(f"{label} must be a named parameter, not {parameter.kind.description}")
        if parameter.name not in hints:
            raise ToolError(f"{label} needs a type hint")
        try:
            schema, convert = schema_and_converter(hints[parameter.name])
        except UnsupportedType as error:
            raise ToolError(
                f"{label} has a type without a JSON Schema ({error}); expected str, int, "
                "float, bool, list[T], dict[str, T], T | None, Literal, an Enum or an attrs class"
            ) from error
        doc = arg_docs.get(parameter.name)
        if doc and "description" not in schema:
            schema = {**schema, "description": doc}
        default = parameter.default
        if isinstance(default, enum.Enum):
            default = default.value
        if default is parameter.empty:
            required.append(parameter.name)
        elif _is_json_scalar(default):
            schema = {**schema, "default": default}
        properties[parameter.name] = schema
        converters[parameter.name] = convert
    return (
        {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        converters,
    )


def _is_json_scalar(value: object) -> typing.TypeGuard[JsonValue]:
    return value is None or isinstance(value, str | int | float | bool)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and its ``Args:`` entries."""
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        heading = _SECTION.match(stripped)
        if heading and not line.startswith((" ", "\t")):
            section, current = heading.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and stripped:
            entry = _ARG_LINE.match(stripped)
            if entry and (current is None or _indent(line) <= _ARG_INDENT):
                current = entry.group(1).lstrip("*")
                args[current] = entry.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    summary = " ".join(" ".join(description).split())
    return summary, args


_ARG_INDENT = 4
"""Args entries sit at this indent under their heading (inspect.getdoc dedents the rest)."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
