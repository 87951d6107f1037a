"""Opening the SDK transport for a config, with a signal when the server goes away.

The SDK's ``ClientSession`` has no public "connection lost" event: requests
in flight fail with ``CONNECTION_CLOSED``, but an idle session whose server
died says nothing. ``open_transport`` wraps the read stream so that its end
(EOF, or closed under the reader) calls ``on_closed`` — for stdio that is the
process exiting, for HTTP the session's streams being torn down. The
manager waits on that to restart a crashed server without waiting for a call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Self

import anyio
from mcp import StdioServerParameters
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from agentik.mcp._config import HttpServer, StdioServer

_Item = SessionMessage | Exception


class _WatchedRead:
    """A read stream that reports its own end once, then behaves exactly like the inner one."""

    def __init__(self, inner: ReadStream[_Item], on_closed: Callable[[], None]) -> None:
        self._inner = inner
        self._on_closed = on_closed

    async def receive(self) -> _Item:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_closed()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _Item:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def open_transport(
    transport: StdioServer | HttpServer, on_closed: Callable[[], None]
) -> AsyncIterator[TransportStreams]:
    """The SDK transport for ``transport``; ``on_closed`` runs when the server's side ends."""
    if isinstance(transport, StdioServer):
        params = StdioServerParameters(
            command=transport.command,
            args=list(transport.args),
            env=dict(transport.env) or None,
            cwd=transport.cwd,
        )
        async with stdio_client(params) as (read, write):
            yield _WatchedRead(read, on_closed), write
    else:
        async with (
            create_mcp_http_client(headers=dict(transport.headers)) as http,
            streamable_http_client(transport.url, http_client=http) as (read, write),
        ):
            yield _WatchedRead(read, on_closed), write
    on_closed()
