"""Opening the SDK transport for a config, with a signal when the server goes away.

The SDK's ``ClientSession`` has no public "connection lost" event: requests
in flight fail with ``CONNECTION_CLOSED``, but an idle session whose server
died says nothing. ``open_transport`` wraps the read stream so that its end
(EOF, or closed under the reader) calls ``on_closed`` — for stdio that is the
process exiting, for HTTP the session's streams being torn down. The
manager waits on that to restart a crashed server without waiting for a call.

A stdio server's stderr goes through a pipe into ``StderrTail``: each line is
logged (logger ``agentik.mcp.stderr``, debug) and the last few are kept, so a
server that dies can say why in ``health`` (its traceback's last line) rather
than just "connection closed". By the time ``open_transport`` exits, the pipe
has been read to its end (or for at most ``_DRAIN_GRACE`` seconds, when a
grandchild keeps it open).

An HTTP server that refuses the connection (401, 403) is remembered by
``HttpTrace``: the SDK turns a non-JSON error response into a generic
"Server returned an error response", so the status and the server's
``WWW-Authenticate`` challenge are taken from the HTTP client's response
hook instead. The challenge names an error and a scope, never a credential.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from types import TracebackType
from typing import Protocol, Self, TypeVar

import anyio
import httpx2
import mcp.types as mt
import trio
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from agentik._version import __version__
from agentik.mcp._config import HttpServer, StdioServer

CLIENT_INFO = mt.Implementation(name="agentik", version=__version__)
"""What servers see in ``clientInfo``: agentik, not the SDK's default ``mcp``."""

# The SDK's stream protocols and HTTP client factory live in private modules
# (mcp.shared._stream_protocols, mcp.shared._httpx_utils); agentik states the
# same shapes and settings here, so it depends on behaviour, not private names.
_T_co = TypeVar("_T_co", covariant=True)
_T_contra = TypeVar("_T_contra", contravariant=True)


class ReadStream(Protocol[_T_co]):
    """What the SDK's transports yield to read (structurally its ``ReadStream``)."""

    async def receive(self) -> _T_co: ...
    async def aclose(self) -> None: ...
    def __aiter__(self) -> ReadStream[_T_co]: ...
    async def __anext__(self) -> _T_co: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None: ...


class WriteStream(Protocol[_T_contra]):
    """What the SDK's transports yield to write (structurally its ``WriteStream``)."""

    async def send(self, item: _T_contra, /) -> None: ...
    async def aclose(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None: ...


TransportStreams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]

_CONNECT_SECONDS = 30.0
_READ_SECONDS = 300.0
"""A server may hold a response stream open; the SDK's own defaults."""


def mcp_http_client(
    headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None
) -> httpx2.AsyncClient:
    """An HTTP client as the SDK's transports expect one: its timeouts, and
    redirects left off (the transport follows them within the endpoint's
    origin itself)."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(_CONNECT_SECONDS, read=_READ_SECONDS),
        headers=headers,
        auth=auth,
    )


_Item = SessionMessage | Exception
_DRAIN_GRACE = 0.5
_stderr_log = logging.getLogger("agentik.mcp.stderr")


class StderrTail:
    """The last lines a server wrote to stderr, for fault reports."""

    def __init__(self, server: str, lines: int = 20) -> None:
        self._server = server
        self._lines: collections.deque[str] = collections.deque(maxlen=lines)

    def add(self, line: str) -> None:
        if line.strip():
            self._lines.append(line.rstrip())
            _stderr_log.debug("mcp server %r: %s", self._server, line.rstrip())

    def clear(self) -> None:
        self._lines.clear()

    @property
    def last(self) -> str | None:
        return self._lines[-1] if self._lines else None


class HttpTrace:
    """Why the MCP endpoint last refused a request (401/403), until it accepts one again."""

    def __init__(self, url: str) -> None:
        self._url = httpx2.URL(url)
        self.refusal: str | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        """httpx's response hook: note a refusal of the MCP endpoint, forget it on success."""
        if response.request.url.copy_with(query=None, fragment=None) != self._url:
            return  # metadata and token endpoints have their own errors
        if response.status_code in (401, 403):
            challenge = response.headers.get("www-authenticate", "")
            why = f"; WWW-Authenticate: {challenge[:200]}" if challenge else ""
            self.refusal = (
                f"the server refused the connection: HTTP {response.status_code} "
                f"{HTTPStatus(response.status_code).phrase}{why}"
            )
        elif response.is_success:
            self.refusal = None


async def _drain(stream: trio.lowlevel.FdStream, tail: StderrTail, done: trio.Event) -> None:
    async with stream:
        pending = b""
        while chunk := await stream.receive_some():
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                tail.add(line.decode("utf-8", "replace"))
        tail.add(pending.decode("utf-8", "replace"))
    done.set()


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
    transport: StdioServer | HttpServer,
    on_closed: Callable[[], None],
    stderr: StderrTail,
    trace: HttpTrace | None = None,
    auth: httpx2.Auth | None = None,
) -> AsyncIterator[TransportStreams]:
    """The SDK transport for ``transport``; ``on_closed`` runs when the server's side ends.

    Over HTTP, ``trace`` sees every response and ``auth`` (an OAuth provider)
    signs every request."""
    if isinstance(transport, StdioServer):
        params = StdioServerParameters(
            command=transport.command,
            args=list(transport.args),
            env=dict(transport.env) or None,
            cwd=transport.cwd,
        )
        read_end, write_end = os.pipe()
        drained = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, trio.lowlevel.FdStream(read_end), stderr, drained)
            with os.fdopen(write_end, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    errlog.close()  # the child has its own copy; EOF comes when it exits
                    yield _WatchedRead(read, on_closed), write
            with trio.move_on_after(_DRAIN_GRACE):
                await drained.wait()
            nursery.cancel_scope.cancel()
    else:
        http = mcp_http_client(headers=dict(transport.headers), auth=auth)
        if trace is not None:
            http.event_hooks = {"request": [], "response": [trace.on_response]}
        async with (
            http,
            streamable_http_client(transport.url, http_client=http) as (read, write),
        ):
            yield _WatchedRead(read, on_closed), write
    on_closed()
