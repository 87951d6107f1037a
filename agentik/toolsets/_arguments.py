"""Checking a tool call's raw JSON arguments before the tool runs.

``parse_arguments(tool, raw)`` is what the turn loop calls: malformed JSON, a
non-object, or a schema violation raise ``ToolError`` with a message the model
can act on (it names the bad field and what was expected). The validator of
each tool is compiled once and cached for the tool's lifetime: ``@tool``
compiles at decoration, an MCP toolset when it lists the tools, and any other
``NamedTool`` on its first call (so an unusable schema is that tool's error
result, never the agent's crash).
"""

from __future__ import annotations

import json
import weakref

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.toolsets._named_tool import NamedTool
from agentik.toolsets._validate import Check, Failure, SchemaError, compile_schema, describe

_validators: weakref.WeakKeyDictionary[NamedTool, Check] = weakref.WeakKeyDictionary()


def validator_for(tool: NamedTool) -> Check:
    """The compiled check of ``tool.parameters``, built on first use."""
    check = _validators.get(tool)
    if check is None:
        try:
            check = compile_schema(tool.parameters)
        except (SchemaError, RecursionError) as error:
            raise ToolError(
                f"tool {tool.name!r} has an unusable parameters schema: {error}"
            ) from error
        _validators[tool] = check
    return check


def remember_validator(tool: NamedTool, check: Check) -> None:
    """Record an already compiled check (``@tool`` compiles its schema itself)."""
    _validators[tool] = check


def _no_constants(name: str) -> JsonValue:
    raise ValueError(f"{name} is not valid JSON")


# Built once: json.loads with any keyword builds a new decoder per call (3x slower).
_decoder = json.JSONDecoder(parse_constant=_no_constants)


def parse_arguments(tool: NamedTool, raw: str) -> JsonObject:
    """Parse and validate the raw argument text of a call to ``tool``.

    Empty text counts as ``{}`` (some models send it for tools without
    parameters). Raises ``ToolError`` naming the problem otherwise.
    """
    text = raw.strip()
    if not text or text == "{}":  # no arguments, the common case: nothing to parse
        value: JsonValue = {}
    else:
        try:
            value = _decoder.decode(text)
        except json.JSONDecodeError as error:
            raise ToolError(
                f"arguments of tool {tool.name!r} are not valid JSON: {error.msg} "
                f"at line {error.lineno} column {error.colno}"
            ) from error
        except (ValueError, RecursionError) as error:
            raise ToolError(
                f"arguments of tool {tool.name!r} are not valid JSON: {error}"
            ) from error
    if not isinstance(value, dict):
        raise ToolError(
            f"arguments of tool {tool.name!r} must be a JSON object, got {describe(value)}"
        )
    check_arguments(tool, value)
    return value


def check_arguments(tool: NamedTool, arguments: JsonObject) -> None:
    """Raise ``ToolError`` if ``arguments`` do not match ``tool``'s schema."""
    try:
        failure = validator_for(tool)(arguments)
    except RecursionError as error:
        raise ToolError(f"arguments of tool {tool.name!r} are nested too deeply") from error
    except SchemaError as error:
        raise ToolError(f"tool {tool.name!r} has an unusable parameters schema: {error}") from error
    if failure is not None:
        raise ToolError(format_failure(tool.name, failure))


def format_failure(tool_name: str, failure: Failure) -> str:
    """The model-facing text of a failure: tool, field path, rule broken."""
    field = failure.field()
    subject = f"field {field!r}" if field else "the arguments"
    return f"invalid arguments for tool {tool_name!r}: {subject} {failure.message}"
