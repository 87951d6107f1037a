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
runs unchanged. One keep-alive watcher task per connection has a deadline
that moves as the connection goes busy and idle; the write lock is taken
without a schedule point when it is free (the socket write that follows is
one); its task group (``AppTaskGroup``) hands each app an ``AppQueue``, which
waits only when it must. ``CachedHeadersConfig`` builds the ``Date`` and ``Server`` headers once
a second instead of once a response. ``serve`` is hypercorn's
``worker_serve`` for plain TCP listeners, with that class, accepting
connections in bursts (``_accept.serve_sockets``) rather than one per round.

It subclasses hypercorn internals, so pyproject pins hypercorn to the minor
version it was written against; tests/server/test_connections.py checks the
behaviour it must keep (keep-alive expiry, close on shutdown, concurrent
writes, pipelined requests).
"""

from __future__ import annotations

import math
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
from hypercorn.typing import Event as HypercornEvent
from hypercorn.utils import (
    ShutdownError,
    parse_socket_addr,
    raise_shutdown,
    repr_socket_addr,
    wrap_app,
)

from agentik.server._accept import serve_sockets

T = TypeVar("T")


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


class KeepAliveTimer:
    """Closes a connection idle for ``keep_alive_timeout``, or idle when the
    server shuts down; stands in for hypercorn's ``TrioSingleTask`` (same
    ``restart``/``stop`` calls).

    ``stop`` (a request came in) and ``restart`` (its response is done) run
    for every request, so they only record the state; one watcher task per
    connection sleeps until the deadline it last set and, on waking, checks it
    against the state and sleeps again if the connection was busy or used
    since. It wakes at most once per timeout, not once per request.

    Invariants: at most one watcher per connection; a connection is closed
    only while it is idle, once it has been idle for the whole timeout or the
    server is shutting down; a request in progress is never cut off.
    """

    def __init__(
        self, timeout: float, terminated: HypercornEvent, close: Callable[[], Awaitable[None]]
    ) -> None:
        self._timeout = timeout
        self._terminated = terminated
        """hypercorn's ``WorkerContext.terminated``: set when the server shuts down."""
        self._close = close
        self._idle = False
        self._deadline = math.inf
        """When the connection is due to close; infinite while it is busy."""
        self._scope: trio.CancelScope | None = None
        """The watcher's sleep, while a watcher runs (or is about to)."""

    async def restart(self, task_group: Any, action: object) -> None:
        """The connection went idle: close it ``timeout`` from now. (``action``,
        hypercorn's own idle task, is not used: the watcher does its job.)"""
        self._idle = True
        self._deadline = trio.current_time() + self._timeout
        scope = self._scope
        if scope is None:
            self._scope = trio.CancelScope(deadline=self._deadline)
            task_group.spawn(self._watch)
        elif scope.deadline == math.inf:  # the watcher sleeps with no deadline
            scope.deadline = self._deadline

    async def stop(self) -> None:
        """The connection is busy: no timeout until it goes idle again."""
        self._idle = False
        self._deadline = math.inf

    async def _watch(self) -> None:
        while True:
            assert self._scope is not None
            with self._scope:
                await self._terminated.wait()
            terminated = self._terminated.is_set()
            if self._idle and (terminated or trio.current_time() >= self._deadline):
                break
            if terminated:
                # Shutting down while busy: the next restart() (the response
                # is done) starts a watcher that finds it set and closes.
                self._scope = None
                return
            # Busy, or used since this sleep began: sleep until the current
            # deadline (infinite while busy; restart() then sets it).
            self._scope = trio.CancelScope(deadline=self._deadline)
        with trio.CancelScope(shield=True):
            await self._close()


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


class AppTaskGroup(TaskGroup):
    """hypercorn's trio ``TaskGroup``, handing each app an ``AppQueue``."""

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
            queue.receive,
            send,
            trio.to_thread.run_sync,
            trio.from_thread.run,
        )
        return queue.put


class ConnectionServer(TCPServer):
    """hypercorn's ``TCPServer`` with a moving keep-alive deadline, a write lock
    that is not a schedule point when free, and an ``AppQueue`` per request
    (see the module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.idle_task = KeepAliveTimer(  # type: ignore[assignment]  # same calls
            self.config.keep_alive_timeout, self.context.terminated, self._initiate_server_close
        )
        self._held = b""
        """A response head waiting to go out with the start of its body."""
        self._h11_state: object = None
        """h11's ``our_state`` when the last data was sent."""

    async def run(self) -> None:
        # hypercorn's TCPServer.run for a plain socket, with AppTaskGroup.
        socket = cast(trio.SocketStream, self.stream).socket
        try:
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            async with AppTaskGroup() as task_group:
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
                await self.protocol.initiate()
                await self.idle_task.restart(self._task_group, self._idle_timeout)
                await self._read_data()
        except OSError:
            pass
        finally:
            await self._close()

    async def _read_data(self) -> None:
        if self.config.read_timeout is not None:
            await super()._read_data()
            return
        # hypercorn's loop without its per-read ``fail_after(inf)`` scope.
        while True:
            try:
                data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            await self.protocol.handle(RawData(bytes(data)))
            if not data:
                break
        await self.protocol.handle(Closed())

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
        connection = getattr(self.protocol.protocol, "connection", None)
        if type(connection) is not h11.Connection:
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
            await self.protocol.handle(Closed())
        finally:
            lock.release()


async def serve(
    app: Any,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns (or forever): hypercorn's trio
    ``worker_serve`` for plain TCP (no TLS, no QUIC), with ``ConnectionServer``.
    Reports the bound URLs through ``task_status``; on shutdown, stops
    accepting and gives open connections ``config.graceful_timeout``."""
    if config.ssl_enabled:
        raise ValueError("agentik serves plain HTTP; terminate TLS in front of it")
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
                ConnectionServer, wrapped, config, context, ConnectionState(lifespan_state.copy())
            )
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger or trio.sleep_forever)
                    nursery.start_soon(serve_sockets, handler, sockets, server_nursery)
            except* ShutdownError:
                pass
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
