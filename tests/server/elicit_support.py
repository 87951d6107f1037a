"""A server whose one MCP toolset (the tiny server's ``web``, over real HTTP)
asks the person mid-call, for the elicitation tests of every transport.

The scripted model calls ``web_book`` when the user says "book"; the tiny
server then asks "Who is the booking for?" (``name``, ``guests`` defaulting
to 2) and the call, and so the turn, waits for the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx2
import trio
from a2a.client import Client as A2AClient
from a2a.client import ClientConfig, create_client
from hypercorn.config import Config
from hypercorn.trio import serve

from agentik import ScriptedModel
from agentik.server import Client, ServerConfig, serve_agentik
from tests.mcp import tiny_server
from tests.mcp.conftest import tiny_http
from tests.mcp.test_elicitation import _books

TOKENS = {"alice": "alice-token-5e2b8c1d9f0a", "bob": "bob-token-3c7a1e9d2b4f"}


@asynccontextmanager
async def tiny_mcp() -> AsyncIterator[str]:
    """The tiny MCP server over Streamable HTTP on 127.0.0.1 (its URL), as
    ``tests/mcp``'s ``http_url`` fixture serves it."""
    app = tiny_server.build().streamable_http_app(host="127.0.0.1")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(serve, app, config, shutdown_trigger=trio.sleep_forever)
        )
        yield f"{binds[0]}/mcp"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def serve_web(
    mcp_url: str, tmp_path: Path, *, owners: bool = False, **options: object
) -> AsyncIterator[str]:
    """A server (its base URL) on a SQLite file with the tiny MCP server at
    ``mcp_url`` as toolset ``web`` (``options`` go to its McpServerConfig)."""
    config = ServerConfig(
        port=0,
        database=str(tmp_path / "agentik.db"),
        toolsets=(),
        mcp_servers=(tiny_http(mcp_url, name="web", **options),),
        clients=tuple(Client(owner=o, token=t) for o, t in TOKENS.items()) if owners else (),
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:

        async def run(task_status: trio.TaskStatus[str]) -> None:
            await serve_agentik(
                config,
                shutdown_trigger=stop.wait,
                model=ScriptedModel(_books),
                task_status=task_status,
            )

        url: str = await nursery.start(run)
        try:
            yield url
        finally:
            stop.set()


def client(url: str, owner: str | None = None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {TOKENS[owner]}"} if owner else {}
    return httpx2.AsyncClient(base_url=url, headers=headers, timeout=30)


async def asked(http: httpx2.AsyncClient, cid: str) -> list[dict[str, object]]:
    """``GET …/elicitations`` until a question waits (it comes over HTTP from the
    MCP server, so a short real-time poll)."""
    while True:
        response = await http.get(f"/agentik/conversations/{cid}/elicitations")
        if response.status_code == 200 and (waiting := response.json()["elicitations"]):
            return list(waiting)
        await trio.sleep(0.02)


@asynccontextmanager
async def a2a_client(url: str, *, streaming: bool = False) -> AsyncIterator[A2AClient]:
    """An a2a-sdk client of the server at ``url``."""
    async with httpx2.AsyncClient(timeout=30) as http:
        sdk = await create_client(
            url, client_config=ClientConfig(streaming=streaming, httpx_client=http)
        )
        try:
            yield sdk
        finally:
            await sdk.close()
