"""``McpToolset`` before any server runs: what the agent sees, and the name rules."""

from __future__ import annotations

import pytest

from agentik import ToolError
from agentik.agent import ToolsetSource
from agentik.mcp import HttpServer, McpServerConfig, McpState, McpToolset, StdioServer


def stdio(command: str, **options: object) -> McpServerConfig:
    return McpServerConfig(transport=StdioServer(command=command), **options)  # type: ignore[arg-type]


async def test_an_unstarted_server_is_a_source_whose_one_tool_explains_itself() -> None:
    """The catalog shows the server even before it lists tools; calling it says why not."""
    source = McpToolset(stdio("/opt/tools/files-server.exe"))
    assert isinstance(source, ToolsetSource)
    contribution = source.contribution
    assert (contribution.name, contribution.description) == (
        "files-server",
        "Tools of the MCP server 'files-server'.",
    )
    (explain,) = contribution.tools
    assert explain.name == "files-server"
    with pytest.raises(
        ToolError, match=r"^mcp server 'files-server' is unavailable \(starting\); try again later$"
    ):
        await explain.handler({})
    assert source.contribution is contribution
    health = source.health
    assert (health.state, health.restarts, health.tools, health.last_error) == (
        McpState.STARTING,
        0,
        0,
        None,
    )


def test_sibling_servers_never_share_a_derived_name() -> None:
    """Configured names are reserved; a derived name that clashes gets a number."""
    taken = {"srv"}
    first = McpToolset(stdio("srv", name="srv"), taken=taken)
    second = McpToolset(stdio("/usr/bin/srv"), taken=taken)
    third = McpToolset(
        McpServerConfig(transport=HttpServer(url="https://srv:8443/mcp")), taken=taken
    )
    assert [first.name, second.name, third.name] == ["srv", "srv-2", "srv-3"]


def test_a_configured_description_is_the_catalog_row() -> None:
    """Configuration wins over anything the server says."""
    source = McpToolset(stdio("srv", description="Files: read and list."))
    assert source.contribution.description == "Files: read and list."
