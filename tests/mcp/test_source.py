"""``McpToolset`` before any server runs: what the agent sees, and the name rules."""

from __future__ import annotations

import mcp.types as mt
import pytest
import trio
import trio.testing

from agentik import ToolError
from agentik.agent import ToolsetSource
from agentik.mcp import (
    HttpServer,
    McpServerConfig,
    McpState,
    McpToolset,
    StdioServer,
    open_mcp_toolsets,
)
from agentik.toolsets import parse_arguments


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


def _tool(name: str, description: str = "Adds.") -> mt.Tool:
    return mt.Tool(name=name, description=description, input_schema={"type": "object"})


class TestPublish:
    """A listing becomes the contribution; the object changes only when the tools do."""

    def test_the_same_listing_keeps_the_same_object(self) -> None:
        """The agent compares by identity, so a no-op refresh must not look like a change."""
        source = McpToolset(stdio("srv", name="calc"))
        source._publish([_tool("add"), _tool("sub")])
        first = source.contribution
        source._publish([_tool("sub"), _tool("add")])
        assert source.contribution is first

    def test_a_changed_description_or_schema_is_a_new_contribution(self) -> None:
        """Same names, different definitions: the model must see the new ones."""
        source = McpToolset(stdio("srv", name="calc"))
        source._publish([_tool("add")])
        first = source.contribution
        source._publish([_tool("add", "Adds two numbers, now with units.")])
        assert source.contribution is not first
        (add,) = source.contribution.tools
        assert add.description == "Adds two numbers, now with units."

    async def test_a_tool_with_an_unusable_schema_fails_alone(self) -> None:
        """An invalid inputSchema makes that tool an error result, never the toolset a crash.

        The schema is compiled at listing time: the problem is in ``health.reports``
        before any call, the tool is offered with an empty object schema, and a
        remote ``$ref`` is refused without being fetched.
        """
        source = McpToolset(stdio("srv", name="calc"))
        add = mt.Tool(
            name="add",
            description="Adds.",
            input_schema={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        )
        typo = mt.Tool(
            name="typo", input_schema={"type": "object", "properties": {"a": {"type": "int"}}}
        )
        remote = mt.Tool(
            name="remote", input_schema={"$ref": "https://schemas.invalid/remote.json"}
        )
        source._publish([add, typo, remote])
        tools = {t.name: t for t in source.contribution.tools}
        assert list(tools) == ["calc_add", "calc_remote", "calc_typo"]
        assert tools["calc_add"].parameters == add.input_schema
        assert parse_arguments(tools["calc_add"], '{"a": 1, "b": 2}') == {"a": 1, "b": 2}
        typo_reason = (
            "tool 'calc_typo' has an unusable parameters schema: the schema is not valid "
            "JSON Schema Draft 2020-12 at '/properties/a/type': 'int' is not valid under any "
            "of the given schemas"
        )
        remote_reason = (
            "tool 'calc_remote' has an unusable parameters schema: $ref "
            "'https://schemas.invalid/remote.json' is not in the schema; remote references "
            "are not fetched"
        )
        assert source.health.reports == (
            f"mcp tool 'remote' cannot be called: {remote_reason}",
            f"mcp tool 'typo' cannot be called: {typo_reason}",
        )
        for name, reason in (("calc_typo", typo_reason), ("calc_remote", remote_reason)):
            assert tools[name].parameters == {"type": "object"}
            assert parse_arguments(tools[name], '{"a": 1}') == {"a": 1}
            with pytest.raises(ToolError) as refused:
                await tools[name].handler({"a": 1})
            assert str(refused.value) == (
                f"{reason}; mcp server 'calc' must fix it before the tool can be called"
            )

    def test_an_empty_listing_falls_back_to_the_explaining_tool(self) -> None:
        """A toolset needs a tool; a server listing none gets the one that explains."""
        source = McpToolset(stdio("srv", name="calc"))
        source._publish([])
        assert [t.name for t in source.contribution.tools] == ["calc"]


@pytest.fixture
def idle_jump_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only once every task has waited 0.2 s of real time.

    A plain autojump clock would jump while the spawn of the (missing) command
    runs in a worker thread, making that attempt look slow.
    """
    return trio.testing.MockClock(autojump_threshold=0.2)


async def test_restarts_back_off_exponentially_up_to_the_maximum(
    idle_jump_clock: trio.testing.MockClock,
) -> None:
    """Attempts at t = 0, 1, 3, 7, 15, 23, 31 for backoff 1 doubling up to 8 (virtual time)."""
    config = stdio("/nonexistent/srv", backoff=1.0, backoff_max=8.0, connect_timeout=1e6)
    async with open_mcp_toolsets([config]) as (source,):
        start = trio.current_time()
        seen = []
        for t in (0.5, 2, 5, 10, 20, 28, 35):
            await trio.sleep_until(start + t)
            seen.append(source.health.restarts)
        assert seen == [0, 1, 2, 3, 4, 5, 6]
        assert source.state is McpState.FAILED
        assert "No such file or directory" in (source.health.last_error or "")
