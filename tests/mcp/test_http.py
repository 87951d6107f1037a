"""The tiny MCP server over Streamable HTTP on 127.0.0.1, served in the test's own loop."""

from __future__ import annotations

import socket
from functools import partial

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from agentik import ToolError
from agentik.mcp import HttpServer, McpServerConfig, McpState, McpToolset, open_mcp_toolsets
from tests.mcp import tiny_server
from tests.mcp.conftest import tiny_http
from tests.mcp.test_stdio import LIMIT, tool, wait_for


async def test_list_call_and_error_result(http_url: str) -> None:
    """The same toolset as over stdio: named from the server, calls forwarded, errors kept."""
    config = McpServerConfig(transport=HttpServer(url=http_url, headers={"X-Test": "sent"}))
    with trio.fail_after(LIMIT):
        async with open_mcp_toolsets([config]) as (src,):
            assert src.name == "tiny-test-server"
            where = await tool(src, "tiny-test-server_where").handler({"variable": "NOPE"})
            assert where.endswith(" NOPE=None x-test=sent")
            assert src.health.protocol_version == "2026-07-28"
            assert await tool(src, "tiny-test-server_add").handler({"a": 2, "b": 3}) == "5"
            with pytest.raises(ToolError, match=r"^Error executing tool fail: nope$"):
                await tool(src, "tiny-test-server_fail").handler({"message": "nope"})


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_list_changed_adds_and_removes_tools(http_url: str, protocol: str) -> None:
    """Refresh works over HTTP too, through listen or the handshake notification."""
    with trio.fail_after(LIMIT):
        async with open_mcp_toolsets([tiny_http(http_url, name="web", protocol=protocol)]) as (
            src,
        ):
            before = src.contribution
            await tool(src, "web_grow").handler({"name": "parrot"})
            await wait_for(lambda: src.contribution is not before)
            parrot = tool(src, "web_parrot")
            assert await parrot.handler({"text": "hi"}) == "parrot: hi"
            grown = src.contribution
            await tool(src, "web_shrink").handler({"name": "parrot"})
            await wait_for(lambda: src.contribution is not grown)
            with pytest.raises(ToolError, match=r"^tool 'web_parrot' was removed by mcp server"):
                await parrot.handler({"text": "hi"})


async def test_a_hung_call_times_out_without_blocking_other_calls(http_url: str) -> None:
    """The call is bounded; while it hangs, other calls to the same server are answered."""
    timeouts: list[str] = []

    async def hang(src: McpToolset) -> None:
        with pytest.raises(ToolError) as error:
            await tool(src, "web_hang").handler({})
        timeouts.append(str(error.value))

    with trio.fail_after(LIMIT):
        async with open_mcp_toolsets([tiny_http(http_url, name="web", call_timeout=2.0)]) as (src,):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hang, src)
                await trio.sleep(0.1)  # let the hanging call reach the server first
                assert await tool(src, "web_add").handler({"a": 5, "b": 5}) == "10"
                assert timeouts == []  # answered while the other call still hangs
            assert timeouts == ["mcp tool 'hang' of 'web' timed out after 2s"]
            assert src.state is McpState.READY
            assert await tool(src, "web_add").handler({"a": 1, "b": 1}) == "2"
            assert src.state is McpState.READY


async def test_an_unreachable_url_is_reported_and_retried() -> None:
    """Nothing listens on the port: failed, with the reason, and retried with backoff."""
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tiny_http(f"http://127.0.0.1:{port}/mcp", backoff=0.05)
    with trio.fail_after(LIMIT):
        async with open_mcp_toolsets([config]) as (src,):
            assert src.state is McpState.FAILED
            assert src.name == "127-0-0-1"
            await wait_for(lambda: src.health.restarts >= 2)
            assert src.health.last_error


async def test_a_server_that_goes_away_is_reported_and_reconnected() -> None:
    """The HTTP server stops, then comes back on the same port: error results, then tools."""

    async def serve_on(bind: str, *, task_status: trio.TaskStatus[list[str]]) -> None:
        config = Config()
        config.bind = [bind]
        config.accesslog = config.errorlog = None
        app = tiny_server.build().streamable_http_app(host="127.0.0.1")
        await serve(app, config, shutdown_trigger=trio.sleep_forever, task_status=task_status)

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            server = trio.CancelScope()

            async def run_server(bind: str, *, task_status: trio.TaskStatus[list[str]]) -> None:
                with server:
                    await serve_on(bind, task_status=task_status)

            (url,) = await nursery.start(partial(run_server, "127.0.0.1:0"))
            config = tiny_http(f"{url}/mcp", name="web", call_timeout=10.0, backoff=0.05)
            async with open_mcp_toolsets([config]) as (src,):
                add = tool(src, "web_add")
                assert await add.handler({"a": 1, "b": 1}) == "2"
                server.cancel()
                with (
                    trio.fail_after(5),  # well under call_timeout: no waiting for a dead server
                    pytest.raises(ToolError, match=r"^mcp server 'web' closed the connection"),
                ):
                    await add.handler({"a": 1, "b": 1})
                await wait_for(lambda: src.state is not McpState.READY)
                server = trio.CancelScope()
                await nursery.start(partial(run_server, url.removeprefix("http://")))
                await wait_for(lambda: src.state is McpState.READY)
                assert await add.handler({"a": 2, "b": 2}) == "4"
                assert src.health.restarts >= 1
            nursery.cancel_scope.cancel()
