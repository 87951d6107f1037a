"""Graceful shutdown: an in-flight turn finishes and is committed before the server
exits; one that outlasts ``graceful_timeout`` is interrupted (resumable)."""

from __future__ import annotations

from pathlib import Path

import h11
import httpx2
import trio

from agentik.agent._turn_events import INTERRUPTED
from agentik.server import Limits
from agentik.storage import open_sqlite_storage
from tests.server.conftest import start_server
from tests.server.rawconn import RawClient, request_bytes
from tests.server.test_a2a import wait_for_tool_call

TURN = "/agentik/conversations/drain/turns"


async def _post(
    client: httpx2.AsyncClient, text: str, sink: trio.MemorySendChannel[httpx2.Response]
) -> None:
    await sink.send(await client.post(TURN, json={"text": text}))


async def test_shutdown_drains_in_flight_turns(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        async for server in start_server(nursery, tmp_path):
            await server.client.post(TURN, json={"text": 'call enable_toolset {"name": "clock"}'})
            sink, replies = trio.open_memory_channel[httpx2.Response](1)
            nursery.start_soon(_post, server.client, "call clock_slow", sink)
            await wait_for_tool_call(server, "drain", "clock_slow")
            server.stop.set()  # as SIGTERM does: stop accepting, drain, close
            with trio.fail_after(30):
                reply = await replies.receive()
            after = await _refused(server.url)
    assert reply.status_code == 200
    assert reply.json()["text"] == "clock_slow returned: tick"
    assert after is True
    async with open_sqlite_storage(tmp_path / "agentik.db") as storage:
        messages = [m async for m in storage.message_store.get_messages("drain")]
    assert [m.role.value for m in messages[4:]] == ["user", "assistant", "tool", "assistant"]


async def _refused(url: str) -> bool:
    """After shutdown started, new connections are refused."""
    try:
        async with httpx2.AsyncClient(base_url=url) as client:
            await client.get("/health")
    except httpx2.ConnectError:
        return True
    return False


async def test_a_request_during_the_drain_gets_503_and_a_turn_past_the_grace_503(
    tmp_path: Path,
) -> None:
    """Shutdown begun: a request that arrives on a connection still open gets
    503 with ``Retry-After`` (the agent takes no new turn); the turn under way,
    held in a tool that never returns, is interrupted once ``graceful_timeout``
    is over (503 ``interrupted``, resumable) and the server is gone a moment later."""
    answers: list[httpx2.Response] = []
    async with trio.open_nursery() as nursery:
        async for server in start_server(nursery, tmp_path, limits=Limits(graceful_timeout=1.0)):
            await server.client.post(TURN, json={"text": 'call enable_toolset {"name": "clock"}'})
            holder = httpx2.AsyncClient(base_url=server.url, timeout=30)

            async def hold(client: httpx2.AsyncClient) -> None:
                async with client:
                    answers.append(await client.post(TURN, json={"text": "call clock_wait"}))

            nursery.start_soon(hold, holder)
            await wait_for_tool_call(server, "drain", "clock_wait")
            late = await RawClient.connect(int(server.url.rsplit(":", 1)[1]))
            head, body = request_bytes("native-json", "late")
            await late.send(head + body[:3])  # busy: the drain does not close it
            await trio.sleep(0.2)
            began = trio.current_time()
            server.stop.set()
            await trio.sleep(0.2)
            await late.send(body[3:])
            late.request_sent(head, body)
            response = await late.read_event()
            assert isinstance(response, h11.Response)
            assert response.status_code == 503
            assert dict(response.headers)[b"retry-after"] == b"1"
            late.sock.close()
    took = trio.current_time() - began
    assert 1.0 <= took <= 1.0 + 3, took
    [held] = answers
    assert held.status_code == 503
    assert held.json()["error"]["code"] == "interrupted"
    async with open_sqlite_storage(tmp_path / "agentik.db") as storage:
        messages = [m async for m in storage.message_store.get_messages("drain")]
    assert messages[-1].content == INTERRUPTED, "its call is answered, nothing marks it failed"
