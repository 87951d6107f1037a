"""Small real tools for toolset tests: each answers with a fixed text."""

from __future__ import annotations

from agentik._json import JsonObject
from agentik.toolsets import NamedTool, ToolsetContribution

EMPTY_OBJECT: JsonObject = {"type": "object", "properties": {}}


def make_tool(name: str, answer: str = "ok") -> NamedTool:
    """A tool taking no arguments that answers ``answer``."""

    async def handler(arguments: JsonObject) -> str:
        return answer

    return NamedTool(name, f"the {name} tool", dict(EMPTY_OBJECT), handler)


def make_toolset(name: str, *verbs: str, description: str | None = None) -> ToolsetContribution:
    """A toolset whose tools are ``name_verb`` for each verb (``name`` itself for "")."""
    tools = [make_tool(f"{name}_{verb}" if verb else name) for verb in verbs or ("",)]
    return ToolsetContribution(name, description or f"the {name} toolset", tools)


def ping_toolset() -> ToolsetContribution:
    """The plan's synthetic toolset: ``ping`` answers ``pong``."""
    return ToolsetContribution("ping", "answers pong", [make_tool("ping", "pong")])
