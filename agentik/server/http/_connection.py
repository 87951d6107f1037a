"""One HTTP/1.1 connection serving an ASGI app: trio for the I/O, llhttp to parse.

``_h1.RequestParser`` (sans-I/O, on llhttp) turns received bytes into events
(a request head, body data, its end); this module writes the responses
(framed by ``_cycle``: fixed-length, chunked, or delimited by the close on
HTTP/1.0), keeps the state of both sides (keep-alive, pipelining, ``Expect: 100-continue``), and
owns the socket (read and written directly by its base, ``_socket_io``), the
tasks and the deadlines:

- One reader task per connection (``Connection.run``) reads the socket, feeds
  the parser and dispatches its events; for each request it starts the app in a task
  of its own, hands it the body as it comes (``Cycle.receive``) and stops
  reading while more than ``BODY_BUFFER`` bytes of it wait for the app (the
  backpressure on a body the app reads slowly). Pipelined requests wait in
  the parser's queue, and the socket is not read, until the response before
  them is done: responses go out in order.
- One watcher task per connection (``_timer.ConnectionTimer``) enforces the
  keep-alive timeout and the time a client may take to send a request head or
  body (mod_reqtimeout); a client too slow gets ``408`` and is cut off.
- The app's ``send`` and ``receive`` (``_cycle.Cycle``) frame the response
  and send ``100 Continue`` when the app first reads the body.
- Bytes the parser refuses get the status it names (400, 431 for a head past
  ``max_head_bytes``, 505 for an HTTP version other than 1.0 and 1.1) and
  the connection is closed. If an app has the request (its body was
  malformed), it is told ``http.disconnect`` and cancelled first, as for a
  client that left, and the status is left in its scope (``REFUSED``) for
  its access log: one line per refused request, never the app's traceback
  of a body that stopped. A refusal no app saw is logged here, one line.
- A connection accepted into the peers' reserve (past ``max_connections``)
  serves one request that carries the peer header, then closes; a client's
  request there waits for a regular slot or gets ``503`` (``_reserve``).
- What a connection holds is bounded whatever the client sends: a read
  (``MAX_RECV``), fed to the parser ``FEED_SLICE`` bytes at a time once the
  events before are handled (so a read of tiny pipelined requests is not
  made thousands of request objects at once), the parser's own bounds
  (``_h1``), and ``BODY_BUFFER`` of body read ahead of the app, each piece
  counted with its cost as an object (``PIECE_COST``).

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
import logging
import socket
from typing import final

import trio

from agentik._sync import Pending
from agentik.server.http._accept import UNBOUNDED, Slot
from agentik.server.http._cycle import Cycle, wake
from agentik.server.http._framing import ASGIApp, Receive, ResponseHeaders
from agentik.server.http._h1 import BODY, END, HEAD, RequestHead, RequestParser
from agentik.server.http._relay import Relay, relay_request, replay
from agentik.server.http._reserve import AT_CAPACITY, AT_CAPACITY_HEADERS, admit
from agentik.server.http._scope import REFUSED, request_scope
from agentik.server.http._settings import HttpSettings
from agentik.server.http._socket_io import GONE, MAX_RECV, SocketIO
from agentik.server.http._timer import ConnectionTimer

log = logging.getLogger("agentik.server")

FEED_SLICE = 8192
"""Bytes of a read the parser is given at once. A request a few bytes long
becomes some hundred bytes of objects (its head, its header list), so a
whole read of pipelined requests parsed at once would hold twenty times its
size; a slice holds a few hundred. Reads under it, the usual, go whole."""
BODY_BUFFER = 256 * 1024
"""Bytes of a request body read ahead of the app; past it the reader waits."""
LINGER = 2.0
"""Seconds the rest of a refused request body is read and dropped before closing."""


@final
class Connection(SocketIO):
    """An HTTP/1.1 connection: the read loop, the app per request, the end."""

    __slots__ = (
        "_app",
        "_client",
        "_cycle",
        "_ended",
        "_lingering",
        "_nursery",
        "_parser",
        "_peers",
        "_reading",
        "_relay",
        "_resume",
        "_server",
        "_state",
        "_tasks",
        "_timer",
        "_unfed",
        "slot",
    )

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        settings: HttpSettings,
        terminated: trio.Event,
        response_headers: ResponseHeaders,
        state: dict[str, object] | None = None,
        relay: Relay | None = None,
        *,
        slot: Slot | None = None,
    ) -> None:
        super().__init__(sock, response_headers)
        self._app = app
        self._relay = relay
        """Takes requests before the app, from their head (``_relay``)."""
        self._parser = RequestParser(settings.max_head_bytes)
        self._peers = settings.peers
        self.slot = UNBOUNDED if slot is None else slot
        """The accept loop's slot this connection holds (``_accept``): on one
        of the peers' reserve it serves one request, a peer's (``_reserve``)."""
        self._timer = ConnectionTimer(
            settings.keep_alive_timeout, settings.limits, terminated, self._expire
        )
        self._state = state
        """The lifespan state, copied into each request's scope."""
        self._tasks = trio.CancelScope()
        """Around all of the connection's tasks: cancelled to end them."""
        self._reading = trio.CancelScope()
        """Around the read loop: its deadline bounds a lingering close."""
        self._cycle: Cycle | None = None
        """The request being served, until both it and its response are done."""
        self._resume: Pending[None] | None = None
        """The reader, waiting for a response to end before the next request."""
        self._ended = False
        self._lingering = False
        """The response closes the connection; the request body is still coming."""
        self._nursery: trio.Nursery | None = None
        self._unfed = memoryview(b"")
        """The rest of a read the parser has not been given yet (``FEED_SLICE``)."""
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
                if self._cut_unanswered():
                    await self._send_refusal(503, b"retry-after: 1\r\n")
                await trio.aclose_forcefully(self._stream)

    def _cut_unanswered(self) -> bool:
        """The server cancelled the connection (its drain is over, or a second
        signal) while the app, or the relay, had a request and had not begun
        its answer: its client is told (503, then the close) rather than
        finding the connection dropped. A connection that ended itself
        (``_tasks`` cancelled: a refusal, a timeout, the client gone) has
        said what it could."""
        cycle = self._cycle
        return (
            cycle is not None
            and not cycle.started
            and not cycle.disconnected
            and not self._ended
            and not self._tasks.cancel_called
        )

    # -- reading ------------------------------------------------------------------------

    async def _read(self) -> None:
        parser, timer = self._parser, self._timer
        events = parser.events
        while True:
            while events:  # every event the bytes so far hold
                kind, value = events.popleft()
                if kind == BODY:
                    await self._body(value)  # type: ignore[arg-type]
                elif kind == HEAD:
                    while self._cycle is not None:  # pipelined: wait for the response before
                        if not await self._paused():
                            return
                    peers = self._peers
                    if peers is not None and not await admit(
                        value,  # type: ignore[arg-type]
                        peers,
                        self.slot,
                        self._timer,
                        self._turn_away,
                    ):
                        return
                    if not self._start(value):  # type: ignore[arg-type]
                        return
                elif kind == END:
                    cycle = self._cycle
                    if cycle is not None:
                        cycle.end_body()
                        self._next_cycle()
                else:  # ERROR
                    cycle = self._cycle
                    if cycle is not None and cycle.request_done and not await self._paused():
                        return  # after a whole request: its response first, as for the next
                    await self._refuse(value)  # type: ignore[arg-type]
                    return
                if self._ended:
                    return
                if self._lingering:
                    await self._drain()
                    return
            unfed = self._unfed
            if unfed:  # the rest of a large read, a slice at a time
                self._unfed = unfed[FEED_SLICE:]
                parser.feed(unfed[:FEED_SLICE])
                continue
            timer.handled(parser.in_body)
            try:
                data = await self._receive()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            if not data:  # end of stream; a half-close counts as leaving
                return
            timer.arrived(len(data))
            if len(data) <= FEED_SLICE:
                parser.feed(data)
            else:
                self._unfed = memoryview(data)

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

    def _start(self, head: RequestHead) -> bool:
        """A request head is complete: start the app on it, or the relay
        (False: the connection was already due to close, so no request starts)."""
        if not self._timer.stop():
            return False
        relay = self._relay
        route = None
        reserved = self.slot.reserved  # one request: the answer closes
        if (
            relay is not None
            and not reserved
            and head.keep_alive
            and not head.expect_continue
            and head.http_version == "1.1"
            and not any(name == b"transfer-encoding" for name, _ in head.headers)
        ):
            route = relay.route(head.method, head.target, head.headers)
        assert self._nursery is not None
        if route is not None:
            # The scope waits: the app needs one only if the relay gives the request back.
            self._cycle = cycle = Cycle(self, {"method": head.method}, keep_alive=True)
            self._nursery.start_soon(self._run_relay, cycle, head, route)
            return True
        self._cycle = cycle = Cycle(
            self,
            request_scope(head, self._client, self._server, self._state),
            http_version=head.http_version,
            keep_alive=head.keep_alive and not reserved,
            expect_continue=head.expect_continue,
        )
        self._nursery.start_soon(self._run_app, cycle, cycle.receive)
        return True

    async def _turn_away(self) -> None:
        """A request that is not a peer's on a reserve connection: 503 at once,
        before any app, then close (after reading the rest of what it sends
        for up to ``LINGER`` seconds, so the close does not reset the 503)."""
        self._timer.end()  # no 408 after the 503
        log.debug("refused status=503 reason=past max_connections, not from a peer")
        with trio.CancelScope(shield=True):
            await self._send_refusal(503, AT_CAPACITY_HEADERS, AT_CAPACITY)
            with contextlib.suppress(*GONE):
                await self._stream.send_eof()
        self._reading.deadline = trio.current_time() + LINGER
        await self._drain()

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
        """The next request waits until this response is done: wait for it.
        False if the connection ends instead."""
        cycle = self._cycle
        if cycle is None or cycle.settled or self._ended:
            return False  # settled and still current: the connection closes with it
        resume: Pending[None] = Pending()
        self._resume = resume
        await resume.wait()
        return not self._ended

    def _next_cycle(self) -> None:
        """Both sides are done with the request: be ready for the next one."""
        cycle = self._cycle
        if cycle is not None and cycle.settled and cycle.request_done and not cycle.must_close:
            self._cycle = None
            assert self._nursery is not None
            self._timer.restart(self._nursery)

    async def _refuse(self, status: int) -> None:
        """The client sent what cannot be parsed (or past a bound): answer
        ``status``, unless a response has started, and end the connection.

        An app serving the request is cancelled before anything is written:
        woken by the refusal, it would find its body cut short and answer
        (or fail) on its own, a second response start and a traceback for
        every malformed body any client sends."""
        cycle = self._cycle
        if cycle is not None and not cycle.settled:  # an app has the request
            if not cycle.complete:
                if not cycle.started:
                    cycle.scope[REFUSED] = status  # for its access log
                cycle.disconnect()
                self._tasks.cancel()  # the app and this reader: the connection ends
            if cycle.started:
                status = 0  # half a response: only the close can say it
        else:
            log.info("refused status=%d reason=%s", status, self._parser.error)
        if status:
            with trio.CancelScope(shield=True):
                await self._send_refusal(status)
        self._end()

    # -- the app ------------------------------------------------------------------------

    async def _run_app(self, cycle: Cycle, receive: Receive) -> None:
        try:
            await self._app(cycle.scope, receive, cycle.send)
        except Exception:
            log.exception("the app failed on %s %s", cycle.scope["method"], cycle.scope["path"])
        else:
            if not cycle.started and not cycle.disconnected:
                log.error(
                    "the app sent no response to %s %s", cycle.scope["method"], cycle.scope["path"]
                )
        await self._finish(cycle)

    async def _finish(self, cycle: Cycle) -> None:
        """The app or the relay returned: a response it left unfinished ends
        the connection; none at all is a 500."""
        if cycle.disconnected or cycle.complete:
            return
        if cycle.started:
            self._end()  # half a response: the client can only tell by the close
        else:
            await cycle.send_error(500)

    async def _run_relay(self, cycle: Cycle, head: RequestHead, route: object) -> None:
        """Relay the request; or, if the relay gives it back, serve it with
        the app, the body replayed."""
        assert self._relay is not None
        given = await relay_request(self._relay, route, head, cycle)
        if given is None or cycle.started or cycle.disconnected:
            await self._finish(cycle)
            return
        extra, body = given
        scope = request_scope(head, self._client, self._server, self._state)
        scope.update(extra)
        cycle.scope = scope
        await self._run_app(cycle, replay(body, cycle.receive))

    def _settle(self, cycle: Cycle) -> None:
        """``cycle``'s response is written whole: wake what waits for that,
        and, if the connection stays open, be ready for the next request."""
        cycle.answered()
        if not cycle.must_close:
            self._next_cycle()  # unless the rest of the request body is still coming
            self._wake_reader(cycle)

    def _wake_reader(self, cycle: Cycle) -> None:
        """The reader may go on: past a pipelined request it held back, or past
        a body the app did not read (dropped from now on)."""
        resume, self._resume = self._resume, None
        wake(resume)
        room, cycle.room = cycle.room, None
        wake(room)

    async def response_done(self, cycle: Cycle) -> None:
        """``cycle``'s response is sent whole (the reader may have found the
        next request meanwhile, and waits for this to go on)."""
        if not cycle.settled:
            self._settle(cycle)
        if cycle.must_close:  # Connection: close, HTTP/1.0...
            with contextlib.suppress(*GONE):
                await self._stream.send_eof()
            if cycle.request_done or cycle.expect_continue or self._parser.finished:
                self._end()  # nothing more comes from the client
                return
            self._lingering = True  # the reader drops the rest of the body, then closes
            self._reading.deadline = trio.current_time() + LINGER
            self._wake_reader(cycle)

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
        wake(self._resume)
        self._stream.socket.close()  # a read waiting on it ends

    async def _expire(self, too_slow: bool) -> None:
        """A deadline passed, or the server shuts down while the connection
        waits for a request (the watcher calls this)."""
        cycle = self._cycle
        answer = too_slow and (cycle is None or not cycle.started)
        if cycle is not None:
            if answer:
                cycle.scope[REFUSED] = 408  # for the app's access log
            cycle.disconnect()
        elif answer:
            log.info("refused status=408 reason=the request head came too slowly")
        self._tasks.cancel()  # the reader, the app, and this task...
        with trio.CancelScope(shield=True):  # ...which finishes first
            if answer:
                await self._send_refusal(408)
            self._ended = True
            self._stream.socket.close()
