"""The tiny MCP server as a subprocess: listing, calls, errors, tool changes."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import attrs
import pytest
import trio

from agentik import NamedTool, ToolError
from agentik.mcp import McpState, McpToolset, open_mcp_toolsets
from tests.mcp.conftest import tiny_stdio

LIMIT = 30  # seconds; a real subprocess on a busy 2-core machine


def tool(source: McpToolset, name: str) -> NamedTool:
    return next(t for t in source.contribution.tools if t.name == name)


async def wait_for(predicate: Callable[[], bool]) -> None:
    """Poll a condition on a real server; real time, bounded by the caller's fail_after."""
    while not predicate():  # noqa: ASYNC110 - the condition lives in another process
        await trio.sleep(0.02)


class TestListAndCall:
    async def test_every_mcp_tool_becomes_a_prefixed_tool_with_its_schema(
        self, tmp_path: pathlib.Path
    ) -> None:
        """The toolset takes the server's name made to fit, and tools keep their input schema;
        the process runs with the configured environment and working directory."""
        config = tiny_stdio()
        config = attrs.evolve(
            config,
            transport=attrs.evolve(
                config.transport, env={"GREETING": "hello there"}, cwd=str(tmp_path)
            ),
        )
        with trio.fail_after(LIMIT):
            async with open_mcp_toolsets([config]) as (source,):
                contribution = source.contribution
                assert contribution.name == "tiny-test-server"
                assert contribution.description == "A tiny MCP server for the tests."
                names = sorted(t.name for t in contribution.tools)
                assert names == [
                    f"tiny-test-server_{verb}"
                    for verb in sorted(
                        [
                            *("add", "book", "crash", "fail", "freeze", "garbage"),
                            *("grow", "hang", "shrink", "where"),
                        ]
                    )
                ]
                add = tool(source, "tiny-test-server_add")
                assert add.description == "Add two integers."
                assert add.parameters["required"] == ["a", "b"]
                assert add.parameters["properties"] == {
                    "a": {"title": "A", "type": "integer"},
                    "b": {"title": "B", "type": "integer"},
                }
                health = source.health
                assert (health.state, health.restarts, health.tools) == (McpState.READY, 0, 10)
                where = tool(source, "tiny-test-server_where")
                assert await where.handler({"variable": "GREETING"}) == (
                    f"cwd={tmp_path} GREETING=hello there x-test=None"
                )
                assert source.contribution is contribution  # stable until the listing changes

    async def test_calls_are_forwarded_and_tool_errors_become_error_results(self) -> None:
        """A result's text comes back; an isError result raises ToolError with the server's text.

        Also: a hung call times out without taking the live server down, and garbage on
        the protocol stream is reported in health but is not fatal (one server, one launch).
        """
        with trio.fail_after(LIMIT):
            async with open_mcp_toolsets([tiny_stdio(name="tiny", call_timeout=0.5)]) as (source,):
                assert await tool(source, "tiny_add").handler({"a": 2, "b": 40}) == "42"
                with pytest.raises(ToolError, match=r"^Error executing tool fail: no luck$"):
                    await tool(source, "tiny_fail").handler({"message": "no luck"})
                with pytest.raises(ToolError, match=r"validation error"):
                    await tool(source, "tiny_add").handler({"a": "two"})

                with pytest.raises(
                    ToolError, match=r"^mcp tool 'hang' of 'tiny' timed out after 0.5s$"
                ):
                    await tool(source, "tiny_hang").handler({})
                assert await tool(source, "tiny_add").handler({"a": 2, "b": 2}) == "4"

                assert await tool(source, "tiny_garbage").handler({}) == "sent garbage"
                await wait_for(lambda: source.health.last_error is not None)
                error = source.health.last_error or ""
                assert error.startswith("unreadable message from the server")
                assert await tool(source, "tiny_add").handler({"a": 1, "b": 1}) == "2"
                assert (source.state, source.health.restarts) == (McpState.READY, 0)


class TestListChanged:
    @pytest.mark.parametrize("protocol", ["auto"])  # "legacy" too over HTTP: test_http.py
    async def test_added_and_removed_tools_show_up_in_the_contribution(self, protocol: str) -> None:
        """2026-07-28 sessions refresh through subscriptions/listen, handshake ones through
        the notification; a removed tool's handler, called later, is an error result."""
        with trio.fail_after(LIMIT):
            async with open_mcp_toolsets([tiny_stdio(name="tiny", protocol=protocol)]) as (src,):
                expected = "2026-07-28" if protocol == "auto" else "2025-11-25"
                assert src.health.protocol_version == expected
                before = src.contribution
                assert await tool(src, "tiny_grow").handler({"name": "parrot"}) == "added parrot"
                await wait_for(lambda: src.contribution is not before)
                parrot = tool(src, "tiny_parrot")
                assert parrot.description == "Echo, added as parrot."
                assert await parrot.handler({"text": "hello"}) == "parrot: hello"

                grown = src.contribution
                await tool(src, "tiny_shrink").handler({"name": "parrot"})
                await wait_for(lambda: src.contribution is not grown)
                assert "tiny_parrot" not in {t.name for t in src.contribution.tools}
                with pytest.raises(
                    ToolError, match=r"^tool 'tiny_parrot' was removed by mcp server 'tiny'$"
                ):
                    await parrot.handler({"text": "hello"})
