"""A server's tools/list as the tools its toolset offers: named, masked, compiled.

Read once per listing (``all_tools``, ``read_listing``), so a call pays for none of it. A
tool whose name shows a credential is left out; names are made to fit
agentik's rules (``_naming``); descriptions and schemas leave with the
server's credentials masked. ``listing_key`` tells whether a new listing
differs from the last (then the toolset keeps the same contribution).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

import attrs
import mcp.types as mt
from mcp import Client

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.mcp._credentials import McpCredentials
from agentik.mcp._faults import Fault
from agentik.mcp._naming import tool_names
from agentik.toolsets import NamedTool, validator_for

_MAX_PAGES = 100
"""A tools/list pagination that never ends is a faulty server, not a long listing."""

ListingKey = tuple[tuple[str, str | None, str | None, str], ...]
"""What a listing's tools are: two listings with the same key offer the same tools."""

Call = Callable[[str, JsonObject], Awaitable[str]]
"""Calls one tool (by its agentik name) on the server, for the tools' handlers."""


@attrs.frozen
class Listing:
    """The tools a listing offers, their MCP names, and what is wrong with it."""

    tools: tuple[NamedTool, ...]
    mcp_names: dict[str, str]
    """Agentik tool name -> the server's name for it."""
    reports: tuple[str, ...]
    """Renames caused by name collisions, tools left out, unusable schemas."""


async def all_tools(client: Client) -> list[mt.Tool]:
    """Every page of the server's tools/list; ``Fault`` if it does not end."""
    tools: list[mt.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise Fault(f"tools/list did not end after {_MAX_PAGES} pages")


def listing_key(tools: Sequence[mt.Tool]) -> ListingKey:
    return tuple(
        (t.name, t.title, t.description, json.dumps(t.input_schema, sort_keys=True))
        for t in sorted(tools, key=lambda t: t.name)
    )


def read_listing(
    toolset: str, tools: Sequence[mt.Tool], credentials: McpCredentials, call: Call
) -> Listing:
    """The tools of ``toolset`` (a server's toolset name) that ``tools`` lists."""
    # A name is offered to the model and stored with every call: one that shows a
    # credential (a server quoting a header as a tool name) is left out, unnamed.
    named_safely = [t for t in tools if credentials.text(t.name) == t.name]
    by_mcp = {tool.name: tool for tool in named_safely}
    naming = tool_names(toolset, (tool.name for tool in named_safely))
    reports = list(naming.reports)
    if hidden := len(tools) - len(named_safely):
        reports.append(f"{hidden} tool(s) left out: their names show a credential")
    named: list[NamedTool] = []
    for tool_name, mcp_name in naming.by_tool_name.items():
        tool, problem = _named_tool(toolset, tool_name, by_mcp[mcp_name], credentials, call)
        named.append(tool)
        if problem is not None:
            reports.append(problem)
    return Listing(tuple(named), naming.by_tool_name, tuple(reports))


def _named_tool(
    toolset: str, tool_name: str, tool: mt.Tool, credentials: McpCredentials, call: Call
) -> tuple[NamedTool, str | None]:
    """The tool as the agent offers it, and the problem with its schema, if any.

    The schema is compiled here, once per listing, so a call does not pay
    for it. A schema that cannot be compiled (invalid for its dialect, a
    ``$ref`` that leads nowhere or off to a URL) makes only that tool
    fail: it is offered with an empty object schema (an invalid one could
    make the model's API refuse the whole request) and every call to it
    is an error result saying why; ``health.reports`` says so too.
    """

    async def handler(arguments: JsonObject) -> str:
        # The server's words, result or error, leave here with its credentials masked.
        try:
            return credentials.text(await call(tool_name, arguments))
        except ToolError as error:
            masked = credentials.tool_error(error)
            if masked is error:
                raise
            raise masked from None  # the chained causes may show the credential too

    description = credentials.text(tool.description or tool.title or f"The MCP tool {tool.name!r}.")
    named = NamedTool(tool_name, description, credentials.schema(dict(tool.input_schema)), handler)
    try:
        validator_for(named)
    except ToolError as error:
        refusal = f"{error}; mcp server {toolset!r} must fix it before the tool can be called"

        async def refuse(arguments: JsonObject) -> str:
            raise ToolError(refusal)

        stand_in = NamedTool(tool_name, description, {"type": "object"}, refuse)
        return stand_in, f"mcp tool {tool.name!r} cannot be called: {error}"
    return named, None
