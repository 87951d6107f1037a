"""Naming: MCP server and tool names made to fit agentik's toolset rules. Pure.

A toolset name matches ``[A-Za-z0-9-]{1,32}`` here (shorter than the general
64 so tool names keep room); a tool name is ``<toolset>_<verb>`` and matches
``^[A-Za-z0-9_-]{1,64}$``. MCP allows names outside both patterns, so names
are sanitised (any other character becomes ``_`` in a verb, ``-`` in a
toolset name) and cut to length.

Collisions are resolved deterministically: tools are taken in order of their
MCP name, the first keeps the plain name and later ones get ``-2``, ``-3`` …
Every rename caused by a collision is reported, so the operator can see why
``fs_read-2`` exists. The same listing always yields the same names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from agentik.mcp._config import MAX_TOOLSET_NAME, HttpServer, McpServerConfig

MAX_TOOL_NAME = 64
_NOT_TOOLSET = re.compile(r"[^A-Za-z0-9]+")
_NOT_VERB = re.compile(r"[^A-Za-z0-9_-]")
_MAX_DESCRIPTION = 200


def toolset_name(raw: str, *, fallback: str = "mcp") -> str:
    """A toolset name for a server called ``raw``: ``"My Server.v2"`` becomes ``My-Server-v2``."""
    name = _NOT_TOOLSET.sub("-", raw).strip("-")[:MAX_TOOLSET_NAME].strip("-")
    return name or fallback


def one_line(text: str | None, *, limit: int = _MAX_DESCRIPTION) -> str:
    """``text`` on one line (a catalog row), whitespace collapsed, cut at ``limit`` characters."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


@attrs.frozen(kw_only=True)
class ToolNames:
    """The outcome of naming one listing."""

    by_tool_name: dict[str, str]
    """agentik tool name -> MCP tool name, in MCP-name order."""
    reports: tuple[str, ...]
    """One message per collision or duplicate, for the log and ``/health``."""


def tool_names(toolset: str, mcp_names: Iterable[str]) -> ToolNames:
    """Name every MCP tool ``<toolset>_<sanitised name>``, resolving collisions."""
    room = MAX_TOOL_NAME - len(toolset) - 1
    by_tool_name: dict[str, str] = {}
    reports: list[str] = []
    seen: set[str] = set()
    for mcp_name in sorted(mcp_names):
        if mcp_name in seen:
            reports.append(f"mcp tool {mcp_name!r} is listed twice; kept the first")
            continue
        seen.add(mcp_name)
        verb = _NOT_VERB.sub("_", mcp_name)[:room] or "tool"
        name = f"{toolset}_{verb}"
        n = 1
        while name in by_tool_name:
            n += 1
            suffix = f"-{n}"
            name = f"{toolset}_{verb[: room - len(suffix)]}{suffix}"
        if n > 1:
            first = f"{toolset}_{verb}"
            reports.append(
                f"mcp tool {mcp_name!r} is named {name!r}: {first!r} already names "
                f"mcp tool {by_tool_name[first]!r}"
            )
        by_tool_name[name] = mcp_name
    return ToolNames(by_tool_name=by_tool_name, reports=tuple(reports))


def config_label(config: McpServerConfig) -> str:
    """A name for a server that has not told us its own: its command or host."""
    if isinstance(config.transport, HttpServer):
        return config.transport.url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return config.transport.command.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe")
