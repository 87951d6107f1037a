"""One HTTP/1.1 connection serving an ASGI app: trio for the I/O, h11 for the framing.

h11 is sans-I/O: it turns received bytes into events (a request head, body
data, its end) and the events this side sends into bytes, and it keeps the
state of both sides of the connection (keep-alive, pipelining, chunked and
fixed-length bodies, ``Expect: 100-continue``). This module owns the socket,
the tasks and the deadlines around it:

- One reader task per connection (``Connection.run``) reads the socket, feeds
  h11 and dispatches its events; for each request it starts the app in a task
  of its own, hands it the body as it comes (``Cycle.receive``) and stops
  reading while more than ``BODY_BUFFER`` bytes of it wait for the app (the
  backpressure on a body the app reads slowly). Pipelined requests wait in
  h11's buffer until the response before them is done: responses go out in
  order.
- One watcher task per connection (``_timer.ConnectionTimer``) enforces the
  keep-alive timeout and the time a client may take to send a request head or
  body (mod_reqtimeout); a client too slow gets ``408`` and is cut off.
- The app's ``send`` writes through h11. The head of a fixed-length response
  waits for its body, so a small response is one socket write.
- ``100 Continue`` goes out when the app first reads the body (as uvicorn
  does), so a request the app refuses at once (401, or 413 for a
  Content-Length past the limit) never gets it.
- Bytes h11 cannot parse get the status it suggests (400, or 431 for a head
  past ``max_head_bytes``) and the connection is closed.

Invariants: a connection ends whole. When the client goes away (end of
stream, reset, a failed write) or a deadline passes, the app still answering
gets ``http.disconnect`` and is cancelled, and the socket is closed at once;
only an app that has finished its response is left to return by itself. At
most one request per connection is in the app before its response is done.
Every ``receive`` is a trio checkpoint, even when the body is already there;
waits use agentik's one waiting primitive, ``Pending``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, final
from urllib.parse import unquote

import attrs
import h11
import trio

from agentik.server._timer import ConnectionLimits, ConnectionTimer
from agentik.storage._pending import Pending

log = logging.getLogger("agentik.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_RECV = 65536
"""Bytes asked of the socket per read."""
BODY_BUFFER = 256 * 1024
"""Bytes of a request body read ahead of the app; past it the reader waits."""
LINGER = 2.0
"""Seconds the rest of a refused request body is read and dropped before closing."""

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_AT_REST = frozenset({h11.IDLE, h11.DONE, h11.MUST_CLOSE, h11.CLOSED})
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_DISCONNECT = {"type": "http.disconnect"}
_CLOSE = (b"connection", b"close")
_END = h11.EndOfMessage()
"""The end of a response without trailers (h11's events are immutable: one will do)."""
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError)
"""A socket the client left, or one being written by another task."""
_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})


def _stream_error(error: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """A socket's error as ``trio.SocketStream`` raises it."""
    if error.errno in _CLOSED_ERRNOS:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {error}")


@attrs.frozen(kw_only=True)
class HttpSettings:
    """How connections are served (``serve``; ``[limits]`` in agentik.toml)."""

    keep_alive_timeout: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    limits: ConnectionLimits = ConnectionLimits()
    """Request deadlines and the bound on open connections."""
    max_head_bytes: int = 16 * 1024
    """The largest request head (h11's ``max_incomplete_event_size``); past it, 431."""


@final
class ResponseHeaders:
    """The ``Date`` and ``Server`` headers of every response, built once a
    second (``Date`` has a resolution of one second, so the bytes are the same)."""

    __slots__ = ("_headers", "_second", "_server")

    def __init__(self, server: bytes = b"agentik") -> None:
        self._server = server
        self._second = -1
        self._headers: tuple[tuple[bytes, bytes], ...] = ()

    def __call__(self) -> tuple[tuple[bytes, bytes], ...]:
        second = int(time.time())
        if second != self._second:
            date = formatdate(second, usegmt=True).encode()
            self._headers = ((b"date", date), (b"server", self._server))
            self._second = second
        return self._headers


def _wake(pending: Pending[None] | None) -> None:
    if pending is not None and not pending.done:
        pending.set_value(None)


@final
class Cycle:
    """One request and its response: the app's ``receive`` and ``send``."""

    __slots__ = (
        "_chunks",
        "_connection",
        "_end_delivered",
        "_head",
        "_is_head",
        "_more",
        "_receiver",
        "buffered",
        "complete",
        "disconnected",
        "room",
        "scope",
        "settled",
        "started",
    )

    def __init__(self, connection: Connection, scope: Scope) -> None:
        self._connection = connection
        self.scope = scope
        self._is_head = scope["method"] == "HEAD"
        self._chunks: list[bytes] = []
        self.buffered = 0
        """Body bytes received and not yet taken by the app."""
        self._more = True
        """More of the body is to come from the client."""
        self._end_delivered = False
        """The app has had the body's last message."""
        self._receiver: Pending[None] | None = None
        """The app's ``receive``, waiting for body or disconnect."""
        self.room: Pending[None] | None = None
        """The reader, waiting for the app to take the body buffered."""
        self._head = b""
        """A fixed-length response's head, waiting to go out with its body."""
        self.started = False
        """The response head is sent (or held)."""
        self.complete = False
        """The whole response is handed to h11 (and being written)."""
        self.settled = False
        """The whole response is written, and the connection knows it."""
        self.disconnected = False
        """The connection is over; the app may not send any more."""

    # -- the reader's side ----------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Body bytes arrived (dropped once the response is complete)."""
        if self.complete or self.disconnected:
            return
        self._chunks.append(data)
        self.buffered += len(data)
        receiver, self._receiver = self._receiver, None
        _wake(receiver)

    def end_body(self) -> None:
        self._more = False
        receiver, self._receiver = self._receiver, None
        _wake(receiver)

    def disconnect(self) -> None:
        """The connection is over: ``receive`` says so from now on."""
        self.disconnected = True
        self._chunks.clear()
        self.buffered = 0
        receiver, self._receiver = self._receiver, None
        _wake(receiver)
        room, self.room = self.room, None
        _wake(room)

    # -- the app's side ---------------------------------------------------------------

    async def receive(self) -> Message:
        """The next body message, or ``http.disconnect`` once the connection is
        over or the response complete. A checkpoint on every call."""
        connection = self._connection
        if not self.started and connection.h11.they_are_waiting_for_100_continue:
            await connection.send_continue()
        while True:
            if self.disconnected or (self.complete and self._end_delivered):
                await trio.lowlevel.checkpoint()
                return _DISCONNECT
            if not self._end_delivered and (self._chunks or not self._more):
                await trio.lowlevel.checkpoint_if_cancelled()
                chunks = self._chunks
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self._chunks = []
                self.buffered = 0
                more = self._more
                self._end_delivered = not more
                room, self.room = self.room, None
                _wake(room)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return {"type": "http.request", "body": body, "more_body": more}
            if self.complete:  # answered without reading the rest: nothing more comes
                await trio.lowlevel.checkpoint()
                return _DISCONNECT
            pending: Pending[None] = Pending()
            self._receiver = pending
            await pending.wait()

    async def send(self, message: Message) -> None:
        """Send the response start or a piece of its body (ignored once the
        connection is over, as the client can no longer get it)."""
        kind = message["type"]
        if self.disconnected:
            return
        connection = self._connection
        conn = connection.h11
        if kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError(
                    "ASGI 'http.response.body' must come after 'http.response.start'"
                    " and before the response is complete"
                )
            body = message.get("body", b"")
            more = message.get("more_body", False)
            data = conn.send(h11.Data(data=body)) or b"" if body and not self._is_head else b""
            if not more:
                self.complete = True
                data += conn.send(_END) or b""
            if self._head:
                data = self._head + data
                self._head = b""
            if data:
                await connection.write(data)
            if not more:
                receiver, self._receiver = self._receiver, None
                _wake(receiver)
                await connection.response_done(self)
        elif kind == "http.response.start":
            if self.started:
                raise RuntimeError("ASGI 'http.response.start' sent twice")
            self.started = True
            status = message["status"]
            headers = list(message.get("headers", ()))
            fixed_length = False
            for name, _ in headers:
                if name.lower() == b"content-length":
                    fixed_length = True
                    break
            headers += connection.response_headers()
            head = conn.send(
                h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b""))
            )
            if fixed_length:
                self._head = head or b""  # goes out with the body: one write
            elif head:
                await connection.write(head)  # a stream: its head goes out now
        else:
            raise RuntimeError(f"unexpected ASGI message type {kind!r} on an HTTP connection")

    async def send_error(self, status: int) -> None:
        """A response of ``status`` with no body, closing the connection."""
        headers = [(b"content-length", b"0"), _CLOSE]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": b""})


@final
class Connection:
    """An HTTP/1.1 connection: the read loop, the app per request, the end."""

    __slots__ = (
        "_app",
        "_client",
        "_cycle",
        "_ended",
        "_lingering",
        "_lock",
        "_nursery",
        "_reading",
        "_resume",
        "_server",
        "_sock",
        "_state",
        "_stream",
        "_tasks",
        "_timer",
        "h11",
        "response_headers",
    )

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        settings: HttpSettings,
        terminated: trio.Event,
        response_headers: ResponseHeaders,
        state: dict[str, object] | None = None,
    ) -> None:
        self._app = app
        self._sock = sock
        """The client's socket (non-blocking), read and written directly on the hot path."""
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        """The same socket through trio, for the rest (waiting to write, EOF, closing)."""
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.max_head_bytes)
        self._timer = ConnectionTimer(
            settings.keep_alive_timeout, settings.limits, terminated, self._expire
        )
        self.response_headers = response_headers
        self._state = state
        """The lifespan state, copied into each request's scope."""
        self._tasks = trio.CancelScope()
        """Around all of the connection's tasks: cancelled to end them."""
        self._reading = trio.CancelScope()
        """Around the read loop: its deadline bounds a lingering close."""
        self._lock = trio.Lock()
        """Held while writing: an app's response and a 408 never interleave."""
        self._cycle: Cycle | None = None
        self._resume: Pending[None] | None = None
        """The reader, waiting for a response to end before the next request."""
        self._ended = False
        self._lingering = False
        """The response closes the connection; the request body is still coming."""
        self._nursery: trio.Nursery | None = None
        self._client: tuple[str, int] | None = None
        self._server: tuple[str, int] | None = None

    async def run(self) -> None:
        """Serve requests until the client leaves, a deadline passes or the
        server shuts down; then close the socket."""
        try:
            sock = self._stream.socket
            self._client = sock.getpeername()[:2]
            self._server = sock.getsockname()[:2]
            with self._tasks:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self._timer.restart(nursery)
                    with self._reading:
                        await self._read()
                    self._timer.end()
                    self._end()
        except OSError:
            pass  # the client was gone before its connection was set up
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._stream)

    # -- reading ------------------------------------------------------------------------

    async def _read(self) -> None:
        conn, timer = self.h11, self._timer
        while True:
            while True:  # every event the bytes so far hold
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as error:
                    await self._refuse(error.error_status_hint)
                    return
                kind = type(event)
                if kind is h11.Data:
                    await self._body(event.data)  # type: ignore[union-attr]
                elif kind is h11.Request:
                    if not self._start(event):  # type: ignore[arg-type]
                        return
                elif kind is h11.EndOfMessage:
                    cycle = self._cycle
                    if cycle is not None:
                        cycle.end_body()
                    self._next_cycle()
                elif event is h11.NEED_DATA:
                    break
                elif event is h11.PAUSED:
                    if not await self._paused():
                        return
                else:  # ConnectionClosed
                    return
                if self._ended:
                    return
                if self._lingering:
                    await self._drain()
                    return
            timer.handled(conn.their_state is h11.SEND_BODY)
            try:
                data = await self._receive()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            if not data:  # end of stream; a half-close counts as leaving
                return
            timer.arrived(len(data))
            conn.receive_data(data)

    async def _receive(self) -> bytes:
        """The next bytes from the client (b"" at the end of its stream): what
        ``trio.SocketStream.receive_some`` does, with the same checkpoints and
        errors, without its layers of wrappers (a few per request add up)."""
        sock = self._sock
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = sock.recv(MAX_RECV)
        except BlockingIOError:
            pass  # the usual case: wait for the client
        except OSError as error:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise _stream_error(error) from error
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(sock)  # ClosedResourceError once closed
            try:
                return sock.recv(MAX_RECV)
            except BlockingIOError:
                pass
            except OSError as error:
                raise _stream_error(error) from error

    async def _drain(self) -> None:
        """The response said ``Connection: close`` while the request body was
        still coming: read and drop what the client sends, for up to
        ``LINGER`` seconds, before closing. Closing with its bytes unread
        would send a reset, and a reset can destroy the response before the
        client reads it (nginx's lingering close does the same)."""
        try:  # until the client is done, or the deadline of ``_reading``
            while await self._stream.receive_some(MAX_RECV):
                pass
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def _start(self, request: h11.Request) -> bool:
        """A request head is complete: start the app on it (False: the
        connection was already due to close, so no request starts)."""
        if not self._timer.stop():
            return False
        path, _, query = request.target.partition(b"?")
        scope: Scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "1.1" if request.http_version == b"1.1" else "1.0",
            "method": request.method.decode("ascii"),
            "scheme": "http",
            "path": unquote(path.decode("ascii")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": [(name.lower(), value) for name, value in request.headers.raw_items()],
            "client": self._client,
            "server": self._server,
        }
        if self._state is not None:
            scope["state"] = self._state.copy()
        self._cycle = cycle = Cycle(self, scope)
        assert self._nursery is not None
        self._nursery.start_soon(self._run_app, cycle)
        return True

    async def _body(self, data: bytes) -> None:
        cycle = self._cycle
        if cycle is None:
            return
        cycle.feed(data)
        if cycle.buffered >= BODY_BUFFER:  # wait for the app to take it
            room: Pending[None] = Pending()
            cycle.room = room
            await room.wait()

    async def _paused(self) -> bool:
        """h11 holds the next request until this response is done: wait for it.
        False if the connection ended meanwhile."""
        cycle = self._cycle
        if cycle is None or cycle.settled:
            return False  # nothing will resume it (a protocol switch we refused)
        resume: Pending[None] = Pending()
        self._resume = resume
        await resume.wait()
        return not self._ended

    def _next_cycle(self) -> None:
        """Both sides are done with the request: be ready for the next one."""
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._cycle = None
            assert self._nursery is not None
            self._timer.restart(self._nursery)

    async def _refuse(self, status: int) -> None:
        """The client sent what h11 cannot parse: answer ``status``, if no
        response has started, and end the connection."""
        cycle = self._cycle
        if cycle is None:
            cycle = Cycle(self, {"method": "GET"})  # a response with no request
        if not cycle.started and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await cycle.send_error(status)
        self._end()

    # -- the app ------------------------------------------------------------------------

    async def _run_app(self, cycle: Cycle) -> None:
        try:
            await self._app(cycle.scope, cycle.receive, cycle.send)
        except Exception:
            log.exception("the app failed on %s %s", cycle.scope["method"], cycle.scope["path"])
        else:
            if not cycle.started and not cycle.disconnected:
                log.error(
                    "the app sent no response to %s %s", cycle.scope["method"], cycle.scope["path"]
                )
        if cycle.disconnected or cycle.complete:
            return
        if cycle.started:
            self._end()  # half a response: the client can only tell by the close
        else:
            await cycle.send_error(500)

    async def send_continue(self) -> None:
        data = self.h11.send(
            h11.InformationalResponse(
                status_code=100, headers=list(self.response_headers()), reason=b"Continue"
            )
        )
        if data:
            await self.write(data)

    async def write(self, data: bytes) -> None:
        """Write to the client; a client that is gone ends the connection."""
        lock = self._lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        written = False
        try:
            await self._send_all(data)
            written = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            lock.release()
            if not written:  # gone, or cancelled part-way: the framing is lost
                self._end()

    async def _send_all(self, data: bytes) -> None:
        """``trio.SocketStream.send_all``, with the same checkpoints and errors:
        the socket's buffer takes a response whole, so the first try is direct,
        and only the rest of a large one goes through trio's waiting."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise _stream_error(error) from error
        if sent == len(data):
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self._stream.send_all(memoryview(data)[sent:])

    async def response_done(self, cycle: Cycle) -> None:
        """``cycle``'s response is sent whole (the reader may have found the
        next request meanwhile, and waits for this to go on)."""
        cycle.settled = True
        conn = self.h11
        if conn.our_state is h11.MUST_CLOSE:  # Connection: close, HTTP/1.0...
            with contextlib.suppress(*_GONE):
                await self._stream.send_eof()
            if conn.their_state is not h11.SEND_BODY or conn.client_is_waiting_for_100_continue:
                self._end()  # nothing more comes from the client
                return
            self._lingering = True  # the reader drops the rest of the body, then closes
            self._reading.deadline = trio.current_time() + LINGER
        else:
            self._next_cycle()  # unless the rest of the request body is still coming
        resume, self._resume = self._resume, None
        _wake(resume)
        room, cycle.room = cycle.room, None
        _wake(room)  # a body the app did not read is dropped from now on

    # -- the end ------------------------------------------------------------------------

    def _end(self) -> None:
        """End the connection whole: an app still answering gets
        ``http.disconnect`` and is cancelled; the socket is closed."""
        if self._ended:
            return
        self._ended = True
        self._timer.end()
        cycle = self._cycle
        if cycle is not None:
            if not cycle.complete:
                self._tasks.cancel()  # the reader, the app, the watcher
            cycle.disconnect()
        _wake(self._resume)
        self._stream.socket.close()  # a read waiting on it ends

    async def _expire(self, too_slow: bool) -> None:
        """A deadline passed, or the server shuts down while the connection
        waits for a request (the watcher calls this)."""
        cycle = self._cycle
        if cycle is not None:
            cycle.disconnect()
        self._tasks.cancel()  # the reader, the app, and this task...
        with trio.CancelScope(shield=True):  # ...which finishes first
            if too_slow and (cycle is None or not cycle.started):
                await self._send_408()
            self._ended = True
            self._stream.socket.close()

    async def _send_408(self) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [(b"content-length", b"0"), _CLOSE, *self.response_headers()]
        data = self.h11.send(h11.Response(status_code=408, headers=headers, reason=_REASONS[408]))
        data = (data or b"") + (self.h11.send(h11.EndOfMessage()) or b"")
        with trio.move_on_after(1):  # it fits in the socket's buffer, unless the client is stuck
            with contextlib.suppress(*_GONE):
                await self._stream.send_all(data)
