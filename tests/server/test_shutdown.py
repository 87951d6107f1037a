"""Graceful shutdown: an in-flight turn finishes and is committed before the server exits."""

from __future__ import annotations

from pathlib import Path

import httpx2
import trio

from agentik.storage import open_sqlite_storage
from tests.server.conftest import start_server
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
