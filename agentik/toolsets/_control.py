"""``enable_toolset`` / ``disable_toolset``: the model's switches for one conversation.

The answers are the plan's English sentences; every mistake (missing, empty
or unknown name) is a ``ToolError`` whose text lists the available toolsets,
so the model can correct itself on the next call. The handlers act on ONE
conversation's ``ToolsetActivation``: build them per conversation with
``toolset_control_tools``. The names, descriptions and schema are constants,
so the agent can offer the tools without building handlers.
"""

from __future__ import annotations

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.toolsets._activation import ToolsetActivation
from agentik.toolsets._budget import OverBudget, switch_on, switched_off_text
from agentik.toolsets._dispatch import ToolsetIndex
from agentik.toolsets._failure import quoted
from agentik.toolsets._named_tool import NamedTool
from agentik.toolsets._validate import describe

ENABLE_TOOLSET = "enable_toolset"
DISABLE_TOOLSET = "disable_toolset"
ENABLE_TOOLSET_DESCRIPTION = (
    "Activate a toolset for this conversation, so its tools are offered. Idempotent."
)
DISABLE_TOOLSET_DESCRIPTION = (
    "Deactivate a toolset for this conversation, so its tools are no longer offered. Idempotent."
)


def toolset_name_parameters() -> JsonObject:
    """The schema both tools take: ``{"name": string}`` (a fresh copy each call).

    ``name`` is deliberately not listed as required: a call without it then
    reaches the handler, whose error lists the available toolsets, instead of
    stopping at a bare "field 'name' is required" from argument validation.
    """
    return {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": "The toolset's name, as listed in the Toolsets section.",
            }
        },
        "additionalProperties": False,
    }


TOOLSET_NAME_PARAMETERS: JsonObject = toolset_name_parameters()
"""The schema of ``disable_toolset`` (and of ``enable_toolset`` before it took
``tools``); treat as read-only."""


def enable_toolset_parameters() -> JsonObject:
    """The schema of ``enable_toolset``: ``name``, and optionally ``tools``, to
    enable only some tools of a large toolset, or more of them (a fresh copy
    each call)."""
    schema = toolset_name_parameters()
    properties = schema["properties"]
    assert isinstance(properties, dict)
    properties["tools"] = {
        "type": "array",
        "items": {"type": "string"},
        "description": (
            "Only these of its tools (for a large toolset), added to those already enabled;"
            " all of them when omitted."
        ),
    }
    return schema


ENABLE_TOOLSET_PARAMETERS: JsonObject = enable_toolset_parameters()
"""The schema of ``enable_toolset``; treat as read-only."""


def _requested_name(tool_name: str, index: ToolsetIndex, arguments: JsonObject) -> str:
    name: JsonValue = arguments.get("name")
    if not isinstance(name, str) or not name.strip():
        if name is None:
            problem = "is missing"
        elif isinstance(name, str):
            problem = "is empty"
        else:
            problem = f"must be a string, got {describe(name)}"
        raise ToolError(
            f'toolset name {problem}; call {tool_name}({{"name": X}}) with X one of: '
            f"{_available(index)}"
        )
    if index.get(name) is None:
        raise ToolError(f"unknown toolset {quoted(name)}; available toolsets: {_available(index)}")
    return name


def _available(index: ToolsetIndex) -> str:
    return ", ".join(index.names) or "(none)"


def enable_answer(
    index: ToolsetIndex,
    activation: ToolsetActivation,
    arguments: JsonObject,
    budget: int | None = None,
) -> str:
    """Enable the named toolset (or more of its tools) and say so; refreshes
    its use when it already offers all that was asked.

    Enabling only adds: ``tools`` join those enabled of an active toolset
    (disable it first to keep fewer). Within ``budget`` tokens of tool
    schemas (None: unbounded) the least recently used active toolsets are
    switched off to make room, and the answer names them; a toolset, or the
    tools asked of it, that alone need more is an error (``OverBudget``)
    that changes nothing.
    """
    name = _requested_name(ENABLE_TOOLSET, index, arguments)
    tools = _requested_tools(index, name, arguments)
    if activation.is_active(name):
        enabled = activation.tools_of(name)
        if enabled is None or (tools is not None and tools <= enabled):
            activation.enable(name, tools)
            return f"Toolset '{name}' is already active."
    try:
        evicted = switch_on(index, activation, name, tools, budget)
    except OverBudget as exc:
        if tools is not None or not _one_tool_fits(index, name, exc.budget):
            raise  # no advice: naming its tools could only fail the same way
        raise ToolError(
            f'{exc}; enable only the tools you need: enable_toolset({{"name": "{name}",'
            ' "tools": [...]})'
        ) from exc
    text = f"Toolset '{name}' activated"
    contribution = index.get(name)
    enabled = activation.tools_of(name)
    if enabled is not None and contribution is not None:
        text += f" ({len(enabled)} of its {len(contribution.tools)} tools)"
    if evicted:
        return f"{text}; {switched_off_text(evicted, name)}"
    return f"{text}."


def _one_tool_fits(index: ToolsetIndex, name: str, budget: int) -> bool:
    contribution = index.get(name)
    return contribution is not None and any(index.costs.of(t) <= budget for t in contribution.tools)


def _requested_tools(
    index: ToolsetIndex, name: str, arguments: JsonObject
) -> frozenset[str] | None:
    """The ``tools`` argument: some tools of toolset ``name``, or None for all."""
    raw: JsonValue = arguments.get("tools")
    if raw is None:
        return None
    contribution = index.get(name)
    assert contribution is not None
    known = [t.name for t in contribution.tools]
    if not isinstance(raw, list) or not raw or not all(isinstance(t, str) for t in raw):
        raise ToolError(
            f"tools must be a non-empty list of tool names of toolset {name!r}, got {describe(raw)}"
        )
    unknown = [t for t in raw if isinstance(t, str) and t not in known]
    if unknown:
        raise ToolError(
            f"toolset {name!r} has no tool {quoted(unknown[0])}; its tools are: {', '.join(known)}"
        )
    chosen = frozenset(t for t in raw if isinstance(t, str))
    return None if len(chosen) == len(known) else chosen


def disable_answer(
    index: ToolsetIndex, activation: ToolsetActivation, arguments: JsonObject
) -> str:
    """Disable the named toolset; the answer is the same whether or not it was active."""
    name = _requested_name(DISABLE_TOOLSET, index, arguments)
    activation.disable(name)
    return f"Toolset '{name}' deactivated."


def toolset_control_tools(
    index: ToolsetIndex, activation: ToolsetActivation, budget: int | None = None
) -> tuple[NamedTool, NamedTool]:
    """``enable_toolset`` and ``disable_toolset`` bound to one conversation's
    activation, enabling within ``budget`` tokens of tool schemas."""

    async def enable(arguments: JsonObject) -> str:
        return enable_answer(index, activation, arguments, budget)

    async def disable(arguments: JsonObject) -> str:
        return disable_answer(index, activation, arguments)

    return (
        NamedTool(ENABLE_TOOLSET, ENABLE_TOOLSET_DESCRIPTION, ENABLE_TOOLSET_PARAMETERS, enable),
        NamedTool(DISABLE_TOOLSET, DISABLE_TOOLSET_DESCRIPTION, TOOLSET_NAME_PARAMETERS, disable),
    )
