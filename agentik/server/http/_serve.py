"""``serve``: an ASGI app on a listening socket, one ``_connection.Connection`` per client.

Lifetimes, outermost first: the app's lifespan (startup before the first
connection is accepted, shutdown after the last one closed) > the open
connections > the accept loop (``_accept.serve_sockets``: connections taken
in bursts, at most ``max_connections`` open, and the peers' reserve past it:
``HttpSettings.peers``). On shutdown the accept loop
stops and the listening socket closes, idle keep-alive connections close at
once, busy ones close as soon as their response is done, and whatever is
still open after ``graceful_timeout`` seconds (or once ``interrupt_trigger``
returns) is cancelled.

Plain HTTP/1.1 only: agentik's routes need no HTTP/2 or WebSocket, and TLS is
terminated in front of the server (docs/server.md).
"""

from __future__ import annotations

import logging
import math
import resource
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import final

import trio

from agentik.server.http._accept import Slot, serve_sockets
from agentik.server.http._connection import Connection
from agentik.server.http._framing import ASGIApp, Message, ResponseHeaders
from agentik.server.http._relay import Relay
from agentik.server.http._settings import HttpSettings

log = logging.getLogger("agentik.server")

DESCRIPTORS_RESERVED = 64
"""Descriptors left for everything but client connections (SQLite, the model
client, MCP servers, the listener)."""
DEFAULT_SETTINGS = HttpSettings()
LIFESPAN_TIMEOUT = 60.0
"""Seconds the app's lifespan startup or shutdown may take."""


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking TCP socket bound to ``host:port`` (0: a free port), listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.setblocking(False)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def socket_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


async def serve(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    settings: HttpSettings = DEFAULT_SETTINGS,
    graceful_timeout: float = 30.0,
    backlog: int = 2048,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    interrupt_trigger: Callable[[], Awaitable[None]] | None = None,
    relay: Relay | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` until ``shutdown_trigger`` returns (or
    forever), then drain for ``graceful_timeout`` seconds at most (less if
    ``interrupt_trigger`` returns). Reports the bound URLs through ``task_status``.
    ``relay`` takes the requests it wants before the app (``_relay``)."""
    max_connections = settings.limits.max_connections
    reserve = 0 if settings.peers is None else settings.peers.connections
    warn_if_descriptors_short(max_connections, reserve)
    sock = listening_socket(host, port, backlog)
    try:
        async with trio.open_nursery() as lifespan_nursery:
            lifespan = Lifespan(app)
            lifespan_nursery.start_soon(lifespan.run)
            state = await lifespan.startup()
            terminated = trio.Event()
            headers = ResponseHeaders()

            async def handle(sock: socket.socket, slot: Slot) -> None:
                await Connection(
                    app, sock, settings, terminated, headers, state, relay, slot=slot
                ).run()

            async with trio.open_nursery() as connections:
                task_status.started([socket_url(sock)])
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        partial(serve_sockets, max_connections=max_connections, reserve=reserve),
                        handle,
                        [sock],
                        connections,
                    )
                    await (shutdown_trigger or trio.sleep_forever)()
                    accepting.cancel_scope.cancel()
                sock.close()
                terminated.set()  # idle connections close now, busy ones when answered
                connections.cancel_scope.deadline = trio.current_time() + graceful_timeout
                if interrupt_trigger is not None:
                    # In the lifespan's nursery: cancelled below once connections are done.
                    lifespan_nursery.start_soon(
                        _cancel_when, interrupt_trigger, connections.cancel_scope
                    )
            await lifespan.shutdown()
            lifespan_nursery.cancel_scope.cancel()
    finally:
        sock.close()


async def _cancel_when(trigger: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    await trigger()
    scope.cancel()


@final
class Lifespan:
    """The app's ASGI lifespan protocol. An app that raises on it before
    answering has none, and is served all the same (uvicorn's "auto")."""

    __slots__ = (
        "_app",
        "_failed",
        "_ran",
        "_shutdown",
        "_started",
        "_to_app",
        "_to_app_rx",
        "state",
    )

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._to_app, self._to_app_rx = trio.open_memory_channel[Message](1)
        self._started = trio.Event()
        self._shutdown = trio.Event()
        self._ran = trio.Event()
        self._failed: str | None = None
        self.state: dict[str, object] | None = {}
        """Shared with each request's scope (copied); None if the app has no lifespan."""

    async def run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        scope["state"] = self.state  # type: ignore[assignment]
        try:
            await self._app(scope, self._to_app_rx.receive, self._send)
        except Exception:
            if self._started.is_set():
                log.exception("the app's lifespan failed")
            else:
                log.debug("the app has no lifespan protocol", exc_info=True)
                self.state = None
        finally:
            self._ran.set()
            self._started.set()
            self._shutdown.set()

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind in ("lifespan.startup.complete", "lifespan.startup.failed"):
            if kind == "lifespan.startup.failed":
                self._failed = str(message.get("message", ""))
            self._started.set()
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            # Starlette reports its own cancellation (the server cancelled, not
            # drained) as a failed shutdown: that is no failure of the app.
            cancelled = trio.current_effective_deadline() == -math.inf
            if kind == "lifespan.shutdown.failed" and not cancelled:
                log.error("the app's lifespan shutdown failed: %s", message.get("message", ""))
            self._shutdown.set()

    async def startup(self) -> dict[str, object] | None:
        """Run the app's startup; its state for each request's scope."""
        with trio.fail_after(LIFESPAN_TIMEOUT):
            await self._to_app.send({"type": "lifespan.startup"})
            await self._started.wait()
        if self._failed is not None:
            raise RuntimeError(f"the app's lifespan startup failed: {self._failed!r}")
        return self.state

    async def shutdown(self) -> None:
        if self._ran.is_set():
            return
        with trio.move_on_after(LIFESPAN_TIMEOUT):
            await self._to_app.send({"type": "lifespan.shutdown"})
            await self._shutdown.wait()


def warn_if_descriptors_short(max_connections: int, reserve: int = 0) -> None:
    """Log a warning when the process may run out of file descriptors before
    it reaches ``max_connections`` (and the peers' ``reserve``): accepting
    then fails with EMFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections + reserve + DESCRIPTORS_RESERVED
    if soft != resource.RLIM_INFINITY and soft < needed:
        bound = "max_connections + peer_connections" if reserve else "max_connections"
        log.warning(
            "the open-file limit (%d) is below [limits] %s + %d (%d):"
            " raise it (ulimit -n) or lower max_connections",
            soft,
            bound,
            DESCRIPTORS_RESERVED,
            needed,
        )
