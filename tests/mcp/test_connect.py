"""What a connection sends before the first tool call: who agentik is, how
the protocol version is settled, and what a refused connection reports.

Real HTTP servers on 127.0.0.1 (the tiny server behind ``Recorder``), real
time bounded by ``fail_after``: the SDK's transport runs real sockets.
"""

from __future__ import annotations

import pytest
import trio

import agentik
from agentik import ToolError
from agentik.mcp import HttpServer, McpServerConfig, McpState, open_mcp_toolsets
from tests.mcp import tiny_server
from tests.mcp.recording import Recorder, serving
from tests.mcp.test_stdio import LIMIT, tool, wait_for

AGENTIK = {"name": "agentik", "version": agentik.__version__}


def _app() -> object:
    return tiny_server.build().streamable_http_app(host="127.0.0.1")


def _config(url: str, **options: object) -> McpServerConfig:
    return McpServerConfig(transport=HttpServer(url=url), **options)  # type: ignore[arg-type]


class TestClientInfo:
    async def test_the_handshake_names_agentik_and_its_version(self) -> None:
        """A 2025-11-25 server reads clientInfo from initialize: agentik, not the SDK's "mcp"."""
        recorder = Recorder(_app(), legacy=True)
        with trio.fail_after(LIMIT):
            async with (
                serving(recorder) as url,
                open_mcp_toolsets([_config(f"{url}/mcp")]) as (src,),
            ):
                assert src.state is McpState.READY
        (params,) = [p for m, p in recorder.calls if m == "initialize"]
        assert params["clientInfo"] == AGENTIK

    async def test_a_modern_request_names_agentik_and_its_version(self) -> None:
        """A 2026-07-28 request carries clientInfo in its _meta: agentik too."""
        recorder = Recorder(_app())
        with trio.fail_after(LIMIT):
            async with (
                serving(recorder) as url,
                open_mcp_toolsets([_config(f"{url}/mcp")]) as (src,),
            ):
                assert src.health.protocol_version == "2026-07-28"
        listed = [p for m, p in recorder.calls if m == "tools/list"]
        assert listed
        assert listed[0]["_meta"]["io.modelcontextprotocol/clientInfo"] == AGENTIK


async def _serve_in_scope(
    recorder: Recorder, bind: str, *, task_status: trio.TaskStatus[tuple[str, trio.CancelScope]]
) -> None:
    """Serve ``recorder`` on ``bind`` until the scope handed back is cancelled."""
    with trio.CancelScope() as scope:
        async with serving(recorder, bind) as url:
            task_status.started((url, scope))
            await trio.sleep_forever()


class TestProtocolNegotiation:
    @pytest.mark.parametrize(
        ("legacy", "first"), [(True, "initialize"), (False, "subscriptions/listen")]
    )
    async def test_a_reconnection_sends_no_discover_probe(self, legacy: bool, first: str) -> None:
        """``auto`` probes once per server; after a lost connection it reconnects with the
        version the server answered with, so no ``server/discover`` is wasted on it."""
        recorder = Recorder(_app(), legacy=legacy)
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                url, scope = await nursery.start(_serve_in_scope, recorder, "127.0.0.1:0")
                config = _config(f"{url}/mcp", name="web", backoff=0.05)
                async with open_mcp_toolsets([config]) as (src,):
                    assert src.state is McpState.READY
                    version = src.health.protocol_version
                    assert recorder.methods()[0] == "server/discover"  # the one probe
                    scope.cancel()
                    with pytest.raises(ToolError):  # how an idle handshake session notices
                        await tool(src, "web_add").handler({"a": 1, "b": 2})
                    await wait_for(lambda: src.state is not McpState.READY)
                    recorder.calls.clear()
                    recorder.app = _app()  # a fresh server process, as after a deploy
                    await nursery.start(_serve_in_scope, recorder, url.removeprefix("http://"))
                    await wait_for(lambda: src.state is McpState.READY)
                    assert src.health.protocol_version == version
                    assert "server/discover" not in recorder.methods()
                    assert recorder.methods()[0] == first
                    assert await tool(src, "web_add").handler({"a": 1, "b": 2}) == "3"
                nursery.cancel_scope.cancel()


class TestRefusedConnection:
    @pytest.mark.parametrize(
        ("status", "words"), [(401, "401 Unauthorized"), (403, "403 Forbidden")]
    )
    async def test_a_refusal_names_its_status_in_last_error(self, status: int, words: str) -> None:
        """A server that wants credentials: ``last_error`` says 401/403, not a generic error."""
        recorder = Recorder(_app(), bearer="right", status=status)
        with trio.fail_after(LIMIT):
            async with (
                serving(recorder) as url,
                open_mcp_toolsets([_config(f"{url}/mcp", name="web")]) as (src,),
            ):
                assert src.state is McpState.FAILED
                error = src.health.last_error or ""
                assert words in error, error
                assert "invalid_token" in error

    async def test_the_right_header_connects(self) -> None:
        """The same server with the configured bearer header: ready, no error."""
        recorder = Recorder(_app(), bearer="right")
        headers = {"Authorization": "Bearer right"}
        with trio.fail_after(LIMIT):
            async with serving(recorder) as url:
                transport = HttpServer(url=f"{url}/mcp", headers=headers)
                config = McpServerConfig(transport=transport, name="web")
                async with open_mcp_toolsets([config]) as (src,):
                    assert src.state is McpState.READY
                    assert src.health.last_error is None
