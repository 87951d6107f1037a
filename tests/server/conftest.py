"""Servers started in-process on a free 127.0.0.1 port, on a real SQLite file.

Every test talks HTTP to them through a real client (httpx2, the a2a-sdk, the
AG-UI models); nothing is mocked. The server runs in the test's nursery and
is cancelled at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import httpx2
import pytest
import trio

from agentik.server import Limits, ServerConfig, serve_agentik

TOOLSETS = ("tests.server.sample_toolsets:clock",)


@attrs.frozen
class Running:
    url: str
    client: httpx2.AsyncClient
    config: ServerConfig
    stop: trio.Event


async def start_server(
    nursery: trio.Nursery, tmp_path: Path, **changes: object
) -> AsyncIterator[Running]:
    config = attrs.evolve(
        ServerConfig(port=0, database=str(tmp_path / "agentik.db"), toolsets=TOOLSETS),
        **changes,
    )
    stop = trio.Event()

    async def trigger() -> None:
        await stop.wait()

    url = await nursery.start(
        lambda task_status: serve_agentik(config, shutdown_trigger=trigger, task_status=task_status)
    )
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        yield Running(url=url, client=client, config=config, stop=stop)
    stop.set()


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in start_server(nursery, tmp_path):
        yield running


@pytest.fixture
async def secured(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in start_server(
        nursery, tmp_path, auth_token="s3cret", limits=Limits(max_body_bytes=4096)
    ):
        yield running


@pytest.fixture
async def mcp_url() -> AsyncIterator[str]:
    """The tiny MCP server (it elicits) over HTTP, for the elicitation tests."""
    from tests.server.elicit_support import tiny_mcp

    async with tiny_mcp() as url:
        yield url
