"""Serving an ASGI app on hypercorn's trio worker, with a cheaper connection handler.

hypercorn's trio ``TCPServer`` costs more per request than a whole agentik turn
in process (``bench/http_floor.py``), and most of that is habits of its
connection loop, not HTTP:

- after every response it *restarts* the keep-alive idle timer: it takes a
  lock, starts a fresh task with ``nursery.start`` and cancels the old one
  (a task spawned and about five task steps per request);
- every socket write (three per response: head, body, and an empty write for
  the end of the message) takes a ``trio.Lock``, which is a schedule point
  even when nobody else holds it;
- the request body reaches the app through a trio memory channel opened per
  request, whose ``send`` and ``receive`` are schedule points even when they
  need not wait (about five task steps per request).

``ConnectionServer`` is that ``TCPServer`` with those three changed (and two
smaller things: no write for an empty chunk, no cancel scope per read when
there is no read timeout); hypercorn's h11, h2 and websocket protocol code
runs unchanged. One watcher task per connection (``_timer.ConnectionTimer``)
enforces its deadlines, keep-alive and the time a client may take to send a
request, moving as the connection goes idle and busy; the write lock is taken
without a schedule point when it is free (the socket write that follows is
one); its task group (``AppTaskGroup``) hands each app an ``AppQueue``, which
waits only when it must. ``CachedHeadersConfig`` builds the ``Date`` and
``Server`` headers once a second instead of once a response. ``serve`` is
hypercorn's ``worker_serve`` for plain TCP listeners, with that class,
accepting connections in bursts (``_accept.serve_sockets``) rather than one
per round, and at most ``max_connections`` at a time.

Three things it does that hypercorn does not:

- A connection ends whole. When the client goes away (end of stream, reset,
  a failed write) or a deadline passes, the app tasks still running for it
  get ``http.disconnect`` and are cancelled, and the socket is closed at
  once; only an app that has finished its response is left to return by
  itself. (hypercorn's own loop relies on the app noticing; the watcher task
  above would otherwise wait for a response that never ends.) A turn the
  request started goes on in the agent: cancelling a caller never stops one.
- A client too slow to send its request head or body gets 408 and is cut off.
- ``100 Continue`` goes out when the app first reads the body (as uvicorn
  does), not as soon as the head is parsed, so a request the app refuses
  at once (401, or 413 for a Content-Length past the limit) never gets it.

It subclasses hypercorn internals, so pyproject pins hypercorn to the minor
version it was written against; tests/server/test_connections.py checks the
behaviour it must keep (keep-alive expiry, close on shutdown, concurrent
writes, pipelined requests, 100-continue), tests/server/test_abandoned.py and
test_slow_clients.py what it adds.
"""

from __future__ import annotations

import logging
import resource
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Generic, TypeVar, cast, final

import h11
import outcome
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.statsd import StatsdLogger
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.task_group import TaskGroup, _handle
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import (
    AppWrapper,
    ASGIReceiveEvent,
    ASGISendEvent,
    ConnectionState,
    LifespanState,
    Scope,
)
from hypercorn.utils import (
    ShutdownError,
    parse_socket_addr,
    raise_shutdown,
    repr_socket_addr,
    wrap_app,
)

from agentik.server._accept import serve_sockets
from agentik.server._timer import ConnectionLimits, ConnectionTimer

log = logging.getLogger("agentik.server")

T = TypeVar("T")

DEFAULT_LIMITS = ConnectionLimits()


class CachedHeadersConfig(Config):
    """hypercorn's ``Config``, with the headers it adds to every response
    (``Date``, ``Server``) built once per second rather than per response.
    ``Date`` has a resolution of one second, so the bytes are the same."""

    def __init__(self) -> None:
        super().__init__()
        self._headers: dict[str, tuple[int, list[tuple[bytes, bytes]]]] = {}

    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        second = int(time.time())
        cached = self._headers.get(protocol)
        if cached is None or cached[0] != second:
            cached = (second, super().response_headers(protocol))
            self._headers[protocol] = cached
        return list(cached[1])  # callers may extend the list they get


@final
class AppQueue(Generic[T]):
    """The channel that carries a request's body (and its disconnect) from the
    connection task to the app's ``receive``, in place of the trio memory
    channel hypercorn's ``TaskGroup.spawn_app`` opens per request.

    A memory channel's ``send`` and ``receive`` are schedule points even when
    they need not wait: two or more task switches per request that buy nothing
    here. This queue waits only when it must: ``put`` when ``capacity`` items
    are queued (the backpressure on a request body the app reads slowly, as
    before), ``receive`` when nothing is queued.

    Invariants: items come out in the order they went in; an item goes straight
    to a waiting receiver, else into the buffer if it has room, else its putter
    waits behind earlier putters; a putter cancelled while waiting has queued
    nothing, a receiver cancelled while waiting has taken nothing. Used only
    from trio tasks of one run. (Not the writer's ``RequestQueue``: that one
    leaves items queued for a consumer that takes them later in batches; here
    a waiting receiver gets each item at once.)
    """

    __slots__ = ("_capacity", "_items", "_putters", "_receiver")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._putters: deque[tuple[trio.lowlevel.Task, T]] = deque()
        """Putters waiting for room, oldest first, with their items."""
        self._receiver: trio.lowlevel.Task | None = None

    async def put(self, item: T) -> None:
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            trio.lowlevel.reschedule(receiver, outcome.Value(item))
        elif len(self._items) < self._capacity and not self._putters:
            self._items.append(item)
        else:
            task = trio.lowlevel.current_task()
            waiting = (task, item)
            self._putters.append(waiting)

            def abort(_: object) -> trio.lowlevel.Abort:
                self._putters.remove(waiting)
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)

    async def receive(self) -> T:
        items = self._items
        if items:
            item = items.popleft()
            if self._putters:  # room for the oldest waiting putter's item
                task, waiting = self._putters.popleft()
                items.append(waiting)
                trio.lowlevel.reschedule(task)
            return item
        if self._putters:  # capacity 0: take the item from its putter
            task, item = self._putters.popleft()
            trio.lowlevel.reschedule(task)
            return item
        self._receiver = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._receiver = None
            return trio.lowlevel.Abort.SUCCEEDED

        received: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return received


Receive = Callable[[], Awaitable[ASGIReceiveEvent]]


class AppTaskGroup(TaskGroup):
    """hypercorn's trio ``TaskGroup``, handing each app an ``AppQueue`` (with
    its ``receive`` passed through ``wrap_receive``)."""

    def __init__(self, wrap_receive: Callable[[Receive], Receive]) -> None:
        super().__init__()
        self._wrap_receive = wrap_receive

    async def spawn_app(
        self,
        app: AppWrapper,
        config: Config,
        scope: Scope,
        send: Callable[[ASGISendEvent | None], Awaitable[None]],
    ) -> Callable[[ASGIReceiveEvent], Awaitable[None]]:
        assert self._nursery is not None
        queue: AppQueue[ASGIReceiveEvent] = AppQueue(config.max_app_queue_size)
        self._nursery.start_soon(
            _handle,
            app,
            config,
            scope,
            self._wrap_receive(queue.receive),
            send,
            trio.to_thread.run_sync,
            trio.from_thread.run,
        )
        return queue.put


class ContinueOnReceive(h11.Connection):
    """h11's connection, never telling hypercorn that a client waits for
    ``100 Continue``: hypercorn would send it as soon as the request head is
    parsed, before the app could refuse the request (a 401, or a 413 for a
    Content-Length past the limit). ``ConnectionServer`` sends it when the app
    first asks for the body instead, as uvicorn does; h11's own bookkeeping
    uses ``client_is_waiting_for_100_continue``, which is unchanged."""

    they_are_waiting_for_100_continue = False  # a plain attribute: read per event


_AT_REST = frozenset({h11.IDLE, h11.DONE, h11.MUST_CLOSE, h11.CLOSED})
"""h11 states of a side with no message half sent."""


class ConnectionServer(TCPServer):
    """hypercorn's ``TCPServer`` with the deadlines of ``ConnectionTimer``, a
    write lock that is not a schedule point when free, an ``AppQueue`` per
    request, ``100 Continue`` sent when the app reads, and an end that leaves
    nothing behind (see the module docstring)."""

    def __init__(self, *args: Any, limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
        super().__init__(*args)
        self.idle_task = ConnectionTimer(  # type: ignore[assignment]  # same calls
            self.config.keep_alive_timeout, limits, self.context.terminated, self._expire
        )
        self._timer = cast(ConnectionTimer, self.idle_task)
        self._tasks = trio.CancelScope()
        """Around the connection's task group: cancelled to end all of it."""
        self._held = b""
        """A response head waiting to go out with the start of its body."""
        self._h11_state: object = None
        """h11's ``our_state`` when the last data was sent."""

    async def run(self) -> None:
        # hypercorn's TCPServer.run for a plain socket, with AppTaskGroup and an
        # h11 connection that leaves 100 Continue to the app's first read.
        socket = cast(trio.SocketStream, self.stream).socket
        try:
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            # Cancelled to end all of the connection's tasks: the read loop,
            # the apps and the watcher. (Not the task group's own scope:
            # hypercorn's TaskGroup.__aexit__ would let its Cancelled escape.)
            with self._tasks:
                async with AppTaskGroup(self._wrap_receive) as task_group:
                    self._task_group = task_group
                    self.protocol = ProtocolWrapper(
                        self.app,
                        self.config,
                        self.context,
                        task_group,
                        ConnectionState(self.state),
                        False,
                        client,
                        server,
                        self.protocol_send,
                        "http/1.1",
                    )
                    protocol = self.protocol.protocol
                    assert isinstance(protocol, H11Protocol)
                    protocol.connection = ContinueOnReceive(
                        h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size
                    )
                    await self.protocol.initiate()
                    await self._timer.restart(task_group, self._idle_timeout)
                    await self._read_data()
                    # The client left, or the socket was closed: end the
                    # connection's tasks too, unless its last exchange is complete.
                    self._timer.end()
                    if not self._at_rest():
                        self._tasks.cancel()
        except OSError:
            pass
        finally:
            await self._close()

    async def _read_data(self) -> None:
        if self.config.read_timeout is not None:
            await super()._read_data()
            return
        # hypercorn's loop without its per-read ``fail_after(inf)`` scope, and
        # telling the timer where the request is.
        timer = self._timer
        while True:
            try:
                data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            if not data:
                await self.protocol.handle(RawData(b""))
                break
            timer.arrived(len(data))
            await self.protocol.handle(RawData(bytes(data)))
            connection = getattr(self.protocol.protocol, "connection", None)  # _h11(), inline
            timer.handled(
                type(connection) is ContinueOnReceive and connection.their_state is h11.SEND_BODY
            )
        await self.protocol.handle(Closed())

    def _h11(self) -> ContinueOnReceive | None:
        """The HTTP/1.1 connection state; None after a switch to HTTP/2 or a WebSocket."""
        connection = getattr(self.protocol.protocol, "connection", None)
        return connection if type(connection) is ContinueOnReceive else None

    def _at_rest(self) -> bool:
        """Neither side is half-way through a message (HTTP/1.1 only)."""
        connection = self._h11()
        return (
            connection is not None
            and connection.our_state in _AT_REST
            and connection.their_state in _AT_REST
        )

    async def _expire(self, too_slow: bool) -> None:
        """A deadline passed, or the server shuts down while the connection
        waits for a request: end the connection and all of its tasks."""
        # Closing the stream first tells an app reading a body that it is
        # over, and stops hypercorn answering 500 for it when it is cancelled.
        await self.protocol.handle(Closed())
        self._tasks.cancel()  # the read loop, the app, and this task...
        with trio.CancelScope(shield=True):  # ...which finishes first
            if too_slow:
                await self._send_408()
            await self.stream.aclose()

    async def _send_408(self) -> None:
        """Tell a client too slow with its request why it is cut off, if no
        response has started (mod_reqtimeout does the same)."""
        connection = self._h11()
        if connection is None or connection.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [(b"content-length", b"0"), (b"connection", b"close")]
        headers += self.config.response_headers("h11")
        data = connection.send(h11.Response(status_code=408, headers=headers))
        await self._write((data or b"") + (connection.send(h11.EndOfMessage()) or b""))

    def _wrap_receive(self, receive: Receive) -> Receive:
        """The app's ``receive``; if the client waits for ``100 Continue``, one
        that sends it before the app's first read (unless the app has answered)."""
        connection = getattr(self.protocol.protocol, "connection", None)  # _h11(), inline
        if (
            type(connection) is not ContinueOnReceive
            or not connection.client_is_waiting_for_100_continue
        ):
            return receive

        async def receive_after_continue() -> ASGIReceiveEvent:
            if connection.client_is_waiting_for_100_continue:
                headers = self.config.response_headers("h11")
                data = connection.send(h11.InformationalResponse(status_code=100, headers=headers))
                await self._write(data or b"")
            return await receive()

        return receive_after_continue

    async def protocol_send(self, event: Event) -> None:
        held = self._held
        if not isinstance(event, RawData):
            if held:
                self._held = b""
                await self._write(held)
            await super().protocol_send(event)
            return
        data = event.data
        head = self._h11_head_sent()
        if held:
            self._held = b""
            data = held + data
        elif head and b"\r\ncontent-length:" in data.lower():
            # The head of a fixed-length HTTP/1.1 response: its body comes in
            # the next call, so write both at once (one write less per response).
            self._held = data
            return
        if data:  # h11 ends a fixed-length message with an empty write
            await self._write(data)

    def _h11_head_sent(self) -> bool:
        """Did the data being sent just move h11 from waiting for a response
        into sending its body (so it is a response head)? False for HTTP/2."""
        connection = getattr(self.protocol.protocol, "connection", None)  # _h11(), inline
        if type(connection) is not ContinueOnReceive:
            return False
        state = connection.our_state
        before, self._h11_state = self._h11_state, state
        return state is h11.SEND_BODY and before is not h11.SEND_BODY

    async def _write(self, data: bytes) -> None:
        lock = self.send_lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            with trio.CancelScope(shield=True):
                await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The client is gone: nothing of the connection may stay behind,
            # also when the read loop waits (a pipelined request) and would
            # never see it.
            await self.protocol.handle(Closed())
            self._tasks.cancel()
        finally:
            lock.release()


async def serve(
    app: Any,
    config: Config,
    *,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns (or forever): hypercorn's trio
    ``worker_serve`` for plain TCP (no TLS, no QUIC), with ``ConnectionServer``
    and at most ``limits.max_connections`` connections open.
    Reports the bound URLs through ``task_status``; on shutdown, stops
    accepting and gives open connections ``config.graceful_timeout``."""
    if config.ssl_enabled:
        raise ValueError("agentik serves plain HTTP; terminate TLS in front of it")
    warn_if_descriptors_short(limits.max_connections)
    config.set_statsd_logger_class(StatsdLogger)
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets().insecure_sockets
            binds = []
            for sock in sockets:
                sock.listen(config.backlog)
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            task_status.started(binds)
            handler = partial(
                ConnectionServer,
                wrapped,
                config,
                context,
                ConnectionState(lifespan_state.copy()),
                limits=limits,
            )
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger or trio.sleep_forever)
                    nursery.start_soon(
                        partial(
                            serve_sockets,
                            handler,
                            sockets,
                            server_nursery,
                            max_connections=limits.max_connections,
                        )
                    )
            except* ShutdownError:
                pass
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


DESCRIPTORS_RESERVED = 64
"""Descriptors left for everything but client connections (SQLite, the model
client, MCP servers, the listener)."""


def warn_if_descriptors_short(max_connections: int) -> None:
    """Log a warning when the process may run out of file descriptors before
    it reaches ``max_connections``: accepting then fails with EMFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections + DESCRIPTORS_RESERVED
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit (%d) is below [limits] max_connections + %d (%d):"
            " raise it (ulimit -n) or lower max_connections",
            soft,
            DESCRIPTORS_RESERVED,
            needed,
        )
