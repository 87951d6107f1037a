"""The connections a node forwards requests on (``_forward``): raw keep-alive
HTTP/1.1 to the other nodes, the owner's answer passed through as it comes.

Why not httpx: a forwarded turn went through a general client (its request
model, its pool, which scans every connection for every request, its
response model and stream wrappers), and that cost more CPU than the owner
spent running the turn: with two nodes and each turn sent to a random node,
node CPU a turn was 3x one node's. A forward needs much less: the request's
head written as bytes beside its body, the answer's head and body parsed by
llhttp (``httptools``, the server's own parser), chunks handed on as they
come, and idle connections kept per peer (a stack: the most recently used
first, so a few connections stay warm and the rest age out).

- Connecting takes at most ``connect_timeout``; an answer has no deadline
  (a turn takes what it takes; the client's leaving ends it).
- An idle connection older than ``idle_timeout`` is closed rather than used
  (the peer's keep-alive would close it soon); at most ``max_idle`` are kept
  per peer.
- A kept-alive connection the peer closed before any byte of an answer is
  replaced once, the request sent again on a new one, as browsers and httpx
  do; any other failure before the first byte is ``Unreachable`` (the
  forwarder asks again who owns the conversation).
- A connection is reused only after an answer read whole that allows it;
  one given up mid-answer (the client left, the owner broke off, a HEAD
  answer) is closed.
- The early forward (``_early``) takes the answer as bytes instead
  (``open_relay``, ``RawAnswer``): only its head and where it ends are
  parsed (``_answer_framing``), its body passed on framed as it came.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar, final
from urllib.parse import urlsplit

import httptools
import trio

from agentik.server._answer_framing import AnswerFraming, AnswerHead, FramingError

_READ = 65536
_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)
_A = TypeVar("_A", "Answer", "RawAnswer")
MAX_ORIGINS = 10_000
"""Base URLs whose parse is kept (pods come and go under new addresses)."""


class Unreachable(Exception):
    """No byte of an answer came: the peer refused, reset or closed the
    connection, or did not accept it in time. The request may be sent again."""


class BrokenOff(Exception):
    """The peer's answer ended before it was whole (its first bytes came)."""


@final
class _Connection:
    __slots__ = ("idle_since", "stream", "used")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.idle_since = 0.0
        self.used = False
        """An answer was read whole on it (a close before the next is the peer's idle timeout)."""


@final
class Answer:
    """The peer's answer: its status and raw headers once the head is in,
    its body as ``body()`` yields it."""

    __slots__ = (
        "_chunks",
        "_connection",
        "_head_only",
        "complete",
        "headers",
        "keep_alive",
        "parser",
        "pending",
        "status",
        "whole_head",
    )

    def __init__(self, connection: _Connection, *, head_only: bool) -> None:
        self._connection = connection
        self._head_only = head_only
        self._chunks: list[bytes] = []
        self.headers: list[tuple[bytes, bytes]] = []
        self.status = 0
        self.whole_head = False
        self.complete = False
        self.keep_alive = False
        self.pending = 0
        """Chunks read but not yet yielded by ``body()``: with ``complete``,
        whether the chunk it just yielded is the answer's last."""
        self.parser = httptools.HttpResponseParser(self)

    # --- llhttp's callbacks ---

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.whole_head = True
        self.status = self.parser.get_status_code()
        if self._head_only:  # no body follows, whatever the head says; not reused
            self.complete = True

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive() and not self._head_only

    # --- reading ---

    async def _feed(self) -> bool:
        """Read once and parse; False at the end of the connection."""
        data = await self._connection.stream.receive_some(_READ)
        if not data:
            return False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            raise BrokenOff(f"the answer could not be parsed: {error}") from error
        return True

    async def _head(self) -> None:
        got = False
        while not self.whole_head:
            try:
                more = await self._feed()
            except (*_ERRORS, BrokenOff) as error:
                if got:
                    raise BrokenOff(f"the answer's head broke off: {error}") from error
                raise Unreachable(f"{type(error).__name__}: {error}") from error
            if not more:
                if got:
                    raise BrokenOff("the connection closed inside the answer's head")
                raise Unreachable("the connection closed before any answer")
            got = True

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (de-chunked); ``BrokenOff`` if the
        answer ends before it is whole."""
        while True:
            if self._chunks:
                chunks, self._chunks = self._chunks, []
                self.pending = len(chunks)
                for chunk in chunks:
                    self.pending -= 1
                    yield chunk
            if self.complete:
                return
            try:
                more = await self._feed()
            except _ERRORS as error:
                raise BrokenOff(f"{type(error).__name__}: {error}") from error
            if not more:
                if not self._needs_length():  # read-until-close framing: that was its end
                    self.complete = True
                    self.keep_alive = False
                    continue
                raise BrokenOff("the connection closed inside the answer")

    def _needs_length(self) -> bool:
        return any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers
        )


@final
class RawAnswer:
    """The peer's answer for relaying as bytes: its head (``AnswerHead``) once
    in, its body as ``next_piece()`` gives it, framing included
    (``_answer_framing``: only what says where the answer ends is parsed)."""

    __slots__ = ("_connection", "_first", "_framing", "_origin", "head")

    def __init__(self, connection: _Connection, *, head_only: bool) -> None:
        self._connection = connection
        self._origin = ("", "", 0)
        """Where its connection goes back to (``PeerClient.release``)."""
        self._framing = AnswerFraming(head_only=head_only)
        self._first = b""
        """Body bytes that came with the head."""
        self.head: AnswerHead | None = None

    @property
    def complete(self) -> bool:
        """The whole answer is read (with ``pieces()``' last yield)."""
        return self._framing.done

    @property
    def keep_alive(self) -> bool:
        return self.head is not None and not self.head.close

    @property
    def body_came(self) -> bool:
        """Bytes of the body came with the head (``next_piece`` has them)."""
        return bool(self._first)

    async def _head(self) -> None:
        framing = self._framing
        got = False
        while framing.head is None:
            try:
                data = await self._connection.stream.receive_some(_READ)
                self._first = framing.feed(data)
            except (*_ERRORS, FramingError) as error:
                if got:
                    raise BrokenOff(f"the answer's head broke off: {error}") from error
                raise Unreachable(f"{type(error).__name__}: {error}") from error
            got = True  # (an end of the connection raised in ``feed``)
        self.head = framing.head

    async def next_piece(self) -> bytes:
        """The body's next bytes as they come, as the peer framed them; b""
        once the answer is whole (``complete``). ``BrokenOff`` if it ends
        before it is whole or is not one this relay passes on. Not an async
        generator, as ``open_relay`` says."""
        if self._first:
            first, self._first = self._first, b""
            return first
        framing = self._framing
        stream = self._connection.stream
        while not framing.done:
            try:
                piece = framing.feed(await stream.receive_some(_READ))
            except (*_ERRORS, FramingError) as error:
                raise BrokenOff(f"{type(error).__name__}: {error}") from error
            if piece:
                return piece
        return b""


@final
class PeerClient:
    """Kept-alive connections to the other nodes, by origin."""

    def __init__(self, *, connect_timeout: float, idle_timeout: float, max_idle: int) -> None:
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._origins: dict[str, tuple[tuple[str, str, int], bytes]] = {}
        """Each base URL's origin and ``Host``, parsed once."""
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    @asynccontextmanager
    async def request(
        self,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> AsyncIterator[Answer]:
        """Send the request; the answer once its head is in. ``headers`` are
        sent as given, after ``Host`` and before ``Content-Length``.
        ``Unreachable`` if no byte of an answer came."""
        head_only = method == b"HEAD"
        async with self._exchange(
            base_url,
            method,
            target,
            headers,
            body,
            lambda connection: Answer(connection, head_only=head_only),
        ) as answer:
            yield answer

    async def open_relay(
        self,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> RawAnswer:
        """``request`` for relaying the answer as bytes (``RawAnswer``), without
        a context manager (trio's hooks for async generators were a tenth of
        the relay's samples, py-spy): the caller must ``release`` the answer."""
        head_only = method == b"HEAD"
        _, answer = await self._open(
            base_url,
            method,
            target,
            headers,
            body,
            lambda connection: RawAnswer(connection, head_only=head_only),
        )
        return answer

    async def release(self, answer: RawAnswer) -> None:
        """Done with ``answer``: its connection kept for the next request if
        the answer was read whole and allows it, else closed."""
        await self._settle(
            answer._origin, answer._connection, answer.complete and answer.keep_alive
        )

    @asynccontextmanager
    async def _exchange(
        self,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        reader: Callable[[_Connection], Answer],
    ) -> AsyncIterator[Answer]:
        origin, answer = await self._open(base_url, method, target, headers, body, reader)
        reuse = False
        try:
            yield answer
            reuse = answer.complete and answer.keep_alive
        finally:
            await self._settle(origin, answer._connection, reuse)

    async def _settle(
        self, origin: tuple[str, str, int], connection: _Connection, reuse: bool
    ) -> None:
        """A connection whose answer is done: kept for the next request to
        ``origin`` if ``reuse`` (read whole, kept alive) and the client is
        open, else closed."""
        if reuse and not self._closed:
            await self._put(origin, connection)
        else:
            await _close(connection)

    async def _open(
        self,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        reader: Callable[[_Connection], _A],
    ) -> tuple[tuple[str, str, int], _A]:
        """Send the request; its origin and the answer once its head is in."""
        known = self._origins.get(base_url)
        if known is None:
            parts = urlsplit(base_url)
            https = parts.scheme == "https"
            port = parts.port or (443 if https else 80)
            known = (parts.scheme, parts.hostname or "", port), parts.netloc.encode("latin-1")
            if len(self._origins) < MAX_ORIGINS:
                self._origins[base_url] = known
        origin, netloc = known
        lines = [method, b" ", target, b" HTTP/1.1\r\nhost: ", netloc]
        for name, value in headers:
            lines += (b"\r\n", name, b": ", value)
        if body or method not in (b"GET", b"HEAD", b"DELETE", b"OPTIONS"):
            lines += (b"\r\ncontent-length: ", str(len(body)).encode())
        lines.append(b"\r\n\r\n")
        wire = b"".join(lines) + body
        while True:
            connection = await self._take(origin)
            answer = reader(connection)
            try:
                await connection.stream.send_all(wire)
                await answer._head()
            except (*_ERRORS, Unreachable) as error:
                await _close(connection)
                if connection.used:
                    continue  # kept alive, closed by the peer meanwhile: a new one
                if isinstance(error, Unreachable):
                    raise
                raise Unreachable(f"{type(error).__name__}: {error}") from error
            except BaseException:
                await _close(connection)
                raise
            if isinstance(answer, RawAnswer):
                answer._origin = origin
            return origin, answer

    async def _take(self, origin: tuple[str, str, int]) -> _Connection:
        idle = self._idle.get(origin)
        now = trio.current_time()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < self.idle_timeout:
                return connection
            await _close(connection)
        scheme, host, port = origin
        try:
            with trio.fail_after(self.connect_timeout):
                if scheme == "https":
                    if self._tls is None:
                        self._tls = ssl.create_default_context()
                    stream: trio.abc.Stream = await trio.open_ssl_over_tcp_stream(
                        host, port, ssl_context=self._tls
                    )
                else:
                    stream = await trio.open_tcp_stream(host, port)
        except trio.TooSlowError:
            raise Unreachable(f"no connection within {self.connect_timeout:g} s") from None
        except OSError as error:
            raise Unreachable(f"{type(error).__name__}: {error}") from error
        return _Connection(stream)

    async def _put(self, origin: tuple[str, str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self.max_idle:
            await _close(idle.pop(0))  # the oldest goes
        connection.used = True
        connection.idle_since = trio.current_time()
        idle.append(connection)

    async def __aenter__(self) -> PeerClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                await _close(connection)
        self._idle.clear()


async def _close(connection: _Connection) -> None:
    with trio.CancelScope(shield=True):
        await trio.aclose_forcefully(connection.stream)
