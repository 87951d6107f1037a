"""One request and its response on an HTTP/1.1 connection (``_connection``):
the app's ASGI ``receive``, fed by the connection's reader, and its ``send``,
framed here (``_framing``) and written by the connection.

- The head of a fixed-length response waits for its body, so a small
  response is one socket write. Header names and values are checked (no
  line breaks or NULs: no header injection), and a body longer or shorter
  than its ``Content-Length`` is the app's error.
- ``100 Continue`` goes out when the app first reads the body (as uvicorn
  does), so a request the app refuses at once (401, or 413 for a
  Content-Length past the limit) never gets it.

Every ``receive`` is a trio checkpoint, even when the body is already there;
waits use agentik's one waiting primitive, ``Pending``.
"""

from __future__ import annotations

from typing import Any, Protocol, final

import trio

from agentik._sync import Pending
from agentik.server.http._framing import (
    CHUNKED,
    CLOSE,
    FIXED,
    NO_BODY,
    TO_CLOSE,
    Message,
    ResponseHeaders,
    Scope,
    header_line,
    status_line,
)
from agentik.server.http._h1 import has_token


class Writer(Protocol):
    """What a cycle needs of its connection (``_connection.Connection``),
    named here so the two modules do not import each other."""

    async def send_continue(self, cycle: Cycle) -> None: ...

    async def write(self, data: bytes, last: Cycle | None = None) -> None: ...

    async def response_done(self, cycle: Cycle) -> None: ...

    @property
    def response_headers(self) -> ResponseHeaders: ...


PIECE_COST = 64
"""What a body piece counts against ``BODY_BUFFER`` beyond its bytes: its
object's own size, so a client sending a byte per packet cannot make the
buffer a quarter of a million objects."""
_DISCONNECT = {"type": "http.disconnect"}


def wake(pending: Pending[None] | None) -> None:
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
        "_keep_alive",
        "_mode",
        "_more",
        "_receiver",
        "_remaining",
        "_version",
        "buffered",
        "complete",
        "disconnected",
        "expect_continue",
        "must_close",
        "request_done",
        "room",
        "scope",
        "settled",
        "started",
    )

    def __init__(
        self,
        connection: Writer,
        scope: Scope,
        *,
        http_version: str = "1.1",
        keep_alive: bool = False,
        expect_continue: bool = False,
    ) -> None:
        self._connection = connection
        self.scope = scope
        self._is_head = scope["method"] == "HEAD"
        self._version = http_version
        self._keep_alive = keep_alive
        self.expect_continue = expect_continue
        """The client waits for ``100 Continue`` before sending the body."""
        self._chunks: list[bytes] = []
        self.buffered = 0
        """Body received and not yet taken by the app: its bytes, and
        ``PIECE_COST`` a piece."""
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
        self._mode = NO_BODY
        self._remaining = 0
        """Bytes of a fixed-length body still to come from the app."""
        self.started = False
        """The response head is sent (or held)."""
        self.complete = False
        """The whole response is framed (and being written)."""
        self.settled = False
        """The whole response is written, and the connection knows it."""
        self.must_close = not keep_alive
        """The connection ends with this response."""
        self.request_done = False
        """The whole request, body included, has been read."""
        self.disconnected = False
        """The connection is over; the app may not send any more."""

    # -- the reader's side ----------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Body bytes arrived (dropped once the response is complete)."""
        self.expect_continue = False  # the client sends without waiting
        if self.complete or self.disconnected:
            return
        self._chunks.append(data)
        self.buffered += len(data) + PIECE_COST
        receiver, self._receiver = self._receiver, None
        wake(receiver)

    def end_body(self) -> None:
        self._more = False
        self.expect_continue = False
        self.request_done = True
        receiver, self._receiver = self._receiver, None
        wake(receiver)

    def answered(self) -> None:
        """The whole response is written: ``receive`` says so from now on."""
        self.settled = True
        receiver, self._receiver = self._receiver, None
        wake(receiver)

    def disconnect(self) -> None:
        """The connection is over: ``receive`` says so from now on."""
        self.disconnected = True
        self._chunks.clear()
        self.buffered = 0
        receiver, self._receiver = self._receiver, None
        wake(receiver)
        room, self.room = self.room, None
        wake(room)

    # -- the app's side ---------------------------------------------------------------

    async def receive(self) -> Message:
        """The next body message, or ``http.disconnect`` once the connection is
        over or the response complete. A checkpoint on every call."""
        if self.expect_continue and not self.started:
            await self._connection.send_continue(self)
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
                wake(room)
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
        if kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError(
                    "ASGI 'http.response.body' must come after 'http.response.start'"
                    " and before the response is complete"
                )
            body = message.get("body", b"")
            more = message.get("more_body", False)
            mode = self._mode
            data = b""
            if body:
                if mode == FIXED:
                    self._remaining -= len(body)
                    if self._remaining < 0:
                        raise RuntimeError("a response body longer than its Content-Length")
                    data = body
                elif mode == CHUNKED:
                    data = b"%x\r\n%s\r\n" % (len(body), body)
                elif mode == TO_CLOSE:
                    data = body
            if not more:
                if mode == FIXED and self._remaining:
                    raise RuntimeError("a response body shorter than its Content-Length")
                self.complete = True
                self.expect_continue = False
                if mode == CHUNKED:
                    data += b"0\r\n\r\n"
            if self._head:
                data = self._head + data
                self._head = b""
            connection = self._connection
            if data:
                await connection.write(data, None if more else self)
            if not more:
                await connection.response_done(self)
        elif kind == "http.response.start":
            if self.started:
                raise RuntimeError("ASGI 'http.response.start' sent twice")
            head = self._frame(message["status"], message.get("headers", ()))
            self.started = True
            self.expect_continue = False
            if self._mode == FIXED or self._mode == NO_BODY:
                self._head = head  # goes out with the body: one write
            else:
                await self._connection.write(head)  # a stream: its head goes out now
        else:
            raise RuntimeError(f"unexpected ASGI message type {kind!r} on an HTTP connection")

    async def write(self, data: bytes, *, last: bool, close: bool = False) -> None:
        """A relayed answer's bytes, framed by the relay (``_relay.Reply``):
        written as they are, the response whole with ``last``; ``close`` on
        the first write: the connection ends after it."""
        if self.disconnected:
            return
        if self.complete:
            raise RuntimeError("a relayed answer written past its end")
        if not self.started:
            self.started = True
            self.expect_continue = False
            self.must_close = self.must_close or close
        if last:
            self.complete = True
        connection = self._connection
        if data:
            await connection.write(data, self if last else None)
        if last:
            await connection.response_done(self)

    def _frame(self, status: object, headers: Any) -> bytes:
        """The response head for ``status`` and the app's ``headers``, and how
        its body is framed (as h11 frames it, RFC 9112 §6)."""
        parts = [status_line(status)]
        length = -1
        close = False
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                if not value.isdigit() or length not in (-1, int(value)):
                    raise RuntimeError(f"invalid response Content-Length {value!r}")
                length = int(value)
            elif lower == b"transfer-encoding":
                continue  # this side frames the body: chunked when no length is given
            elif lower == b"connection":
                close = close or has_token(value, b"close")
            parts.append(header_line(name, value))
        if self._is_head or status in (204, 304) or status < 200:  # type: ignore[operator]
            self._mode = NO_BODY
        elif length >= 0:
            self._mode = FIXED
            self._remaining = length
        elif self._version == "1.1":
            self._mode = CHUNKED
            parts.append(b"transfer-encoding: chunked\r\n")
        else:
            self._mode = TO_CLOSE
            self.must_close = True
        if close:
            self.must_close = True
        elif self.must_close:
            parts.append(b"connection: close\r\n")
        parts.append(self._connection.response_headers())
        parts.append(b"\r\n")
        return b"".join(parts)

    async def send_error(self, status: int) -> None:
        """A response of ``status`` with no body, closing the connection."""
        headers = [(b"content-length", b"0"), CLOSE]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": b""})
