"""The request side of HTTP/1.1, sans-I/O: bytes in, request events out.

llhttp (Node's HTTP parser, through httptools, the parser uvicorn uses)
parses; this module turns its callbacks into a queue of events and adds the
checks h11 made that llhttp leaves to its caller: ``Host`` on HTTP/1.1, a
bound on the request head, HTTP versions other than 1.0 and 1.1, trailing
whitespace in header values, and the end of a connection that asked to
close; and the bounds llhttp has none of: on the number of header fields,
and on the framing of a chunked body (chunk-size lines, chunk extensions and
trailers, which httptools buffers without limit: a trailer streamed for
minutes was once held whole). It replaced h11 here because h11, pure
Python, cost 35–45 µs of the server's CPU a request where llhttp costs about
1 (docs/server.md); h11 stays as the oracle the tests hold it to
(tests/server/test_h1.py).

Events, in order, in ``RequestParser.events``:

- ``(HEAD, RequestHead)``: a request head is complete;
- ``(BODY, bytes)``: a piece of its body, at most one per request per
  ``feed`` (a read of many small chunks is one piece, not thousands);
- ``(END, None)``: its body is complete (trailers are dropped);
- ``(ERROR, status)``: the bytes cannot be parsed; nothing follows. The status
  is what to answer: 400, 431 (a head past ``max_head_bytes`` or
  ``MAX_HEADERS`` fields, or a chunked body's framing past its bound) or 505
  (an HTTP version other than 1.0 and 1.1); ``error`` says why.

Bounds: whatever the bytes, the parser holds at most ``max_head_bytes`` plus
one ``feed`` of a request head or of a chunked body's framing (llhttp and
httptools hold the partial line; this module counts what was fed for it),
and the events of one ``feed``. A chunked body's framing may take
``max_head_bytes`` plus ``CHUNK_FRAMING`` bytes per chunk in all (RFC 9112
§7.1.1 asks servers to bound chunk extensions), which bounds every byte of
it by the body's own size: the body is the app's to bound (413). Its
trailer fields, which httptools holds until each ends, count like header
fields: ``max_head_bytes`` of them, whatever room the chunks left.

After a request that does not keep the connection alive (``Connection:
close``, HTTP/1.0, an ``Upgrade`` this server does not do), the rest of what
the client sends is dropped: the connection ends with that response.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import httptools

HEAD: Final = 0
BODY: Final = 1
END: Final = 2
ERROR: Final = 3

Event = tuple[int, object]

MAX_HEADERS: Final = 100
"""Header fields in a request head; past it, 431 (Apache's ``LimitRequestFields``).
Each field costs about a hundred bytes of objects, many times its bytes on
the wire, so the byte bound alone would let a head of tiny fields hold
twenty times ``max_head_bytes``."""
CHUNK_FRAMING: Final = 32
"""Framing bytes a chunk is allowed beyond ``max_head_bytes``: its size line
(16 hex digits at most, as llhttp reads them) and line ends."""


@final
class RequestHead:
    """A complete request head, as the connection needs it."""

    __slots__ = ("expect_continue", "headers", "http_version", "keep_alive", "method", "target")

    def __init__(
        self,
        method: str,
        target: bytes,
        http_version: str,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        expect_continue: bool,
    ) -> None:
        self.method = method
        self.target = target
        self.http_version = http_version
        """``"1.1"`` or ``"1.0"``."""
        self.headers = headers
        """Names lowercased, values without surrounding whitespace, in order."""
        self.keep_alive = keep_alive
        """The client lets the connection serve another request after this one."""
        self.expect_continue = expect_continue
        """``Expect: 100-continue`` on HTTP/1.1: the client waits before its body."""

    def __repr__(self) -> str:
        return f"RequestHead({self.method!r}, {self.target!r}, {self.http_version!r})"


def has_token(value: bytes, token: bytes) -> bool:
    """Whether a comma-separated header value (``Connection``) lists ``token``
    (lowercase), in any case and spacing."""
    return any(part.strip() == token for part in value.lower().split(b","))


_LINE_OVERHEAD = 4
"""``": "`` and ``"\\r\\n"`` around each header, counted into a head's size."""
_REQUEST_LINE_OVERHEAD = 16
"""The method, version and separators of a request line, roughly."""


@final
class RequestParser:
    """Feed it the bytes a client sends; take the events from ``events``."""

    __slots__ = (
        "_body_fed",
        "_chunk_open",
        "_chunks",
        "_close_token",
        "_ends",
        "_expect",
        "_fed",
        "_framing",
        "_headers",
        "_hosts",
        "_last",
        "_max_head_bytes",
        "_parser",
        "_pieces",
        "_size",
        "_target",
        "_trailers",
        "error",
        "events",
        "finished",
        "in_body",
        "in_head",
    )

    def __init__(self, max_head_bytes: int = 16 * 1024) -> None:
        self._max_head_bytes = max_head_bytes
        self._parser = httptools.HttpRequestParser(self)
        self.events: deque[Event] = deque()
        self.in_head = False
        """A request head has begun and is not complete."""
        self.in_body = False
        """A request head is complete and its body is not."""
        self.finished = False
        """Nothing more is parsed: an error, or the last request of the connection."""
        self._fed = 0
        """Bytes fed while the current head was incomplete (bounds what llhttp holds)."""
        self._size = 0
        self._target = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._hosts = 0
        self._expect = False
        self._close_token = False
        self._last = False
        """The request being parsed is the connection's last."""
        self._ends = 0
        """Requests parsed whole."""
        self._pieces: list[bytes] = []
        """Body pieces of this ``feed``, made one ``BODY`` event at its end."""
        self._body_fed = 0
        """Body bytes of the current request so far."""
        self._chunks = 0
        """Chunks of the current request's body so far."""
        self._framing = 0
        """Bytes of the current request's chunked framing so far (counted by
        the ``feed``: those of a read that also ends its head are not)."""
        self._chunk_open = False
        """A chunk's size line is read and none of its data yet: the next byte
        is data, unless that was the last chunk and trailer fields follow."""
        self._trailers = 0
        """Bytes of the current request's trailer fields so far (counted by
        the ``feed``: those of the read that ends the last chunk's line are not)."""
        self.error = ""
        """Why the bytes were refused (with the ``ERROR`` event)."""

    def feed(self, data: bytes | memoryview) -> None:
        """Parse ``data``, the next bytes from the client, into ``events``."""
        if self.finished:
            return
        began_before = self.in_head
        in_body = self.in_body
        trailing = self._chunk_open
        body_before = self._body_fed
        ends = self._ends
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrade or CONNECT: served as a plain request, then the end.
            if self.in_body:
                self.in_body = False
                self._flush()
                self.events.append((END, None))
            self.finished = True
            return
        except httptools.HttpParserError as error:
            if not self.finished:  # past the last request, llhttp refuses any more bytes
                self._fail(400, str(error) or "malformed request")
            return
        if self._pieces:
            self._flush()
        if self.finished:
            return
        if self.in_body:
            if in_body and self._ends == ends:
                # The whole read was this request's body: what is not body
                # is framing (only a chunked body has any).
                fed = len(data) - (self._body_fed - body_before)
                self._framing += fed
                bound = self._max_head_bytes + CHUNK_FRAMING * self._chunks
                if trailing and fed == len(data):  # after the last chunk: all trailer
                    self._trailers += fed
                    if self._trailers > self._max_head_bytes:
                        self._fail(431, f"the trailer fields exceed {self._max_head_bytes} bytes")
                elif self._framing > bound:
                    self._fail(
                        431,
                        "a chunked body's framing (size lines, extensions, trailers)"
                        f" exceeds {bound} bytes",
                    )
            return
        if not self.in_head:
            return
        # A head is still incomplete: llhttp holds its partial line. Count
        # what was fed for it, so that a head without end is refused.
        if began_before:
            self._fed += len(data)
        else:
            # The whole read, unless a request ended earlier in it (then the
            # head's part is unknown: only its complete lines count, until the
            # next read).
            self._fed = self._size if self._ends != ends else len(data)
        if self._fed > self._max_head_bytes:
            self._fail(431, f"the request head exceeds {self._max_head_bytes} bytes")

    def _fail(self, status: int, error: str) -> None:
        self.finished = True
        self.in_head = self.in_body = False
        self._flush()
        self.error = error
        self.events.append((ERROR, status))

    def _flush(self) -> None:
        """The body pieces so far as one ``BODY`` event."""
        pieces = self._pieces
        if pieces:
            self.events.append((BODY, pieces[0] if len(pieces) == 1 else b"".join(pieces)))
            self._pieces = []

    # -- llhttp's callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.finished:
            return
        self.in_head = True
        self._fed = 0
        self._size = _REQUEST_LINE_OVERHEAD
        self._target = b""
        self._headers = []
        self._hosts = 0
        self._expect = self._close_token = False
        self._body_fed = self._chunks = self._framing = self._trailers = 0
        self._chunk_open = False

    def on_url(self, url: bytes) -> None:
        # llhttp passes a target split across reads in pieces, one call each
        self._target += url
        self._size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.in_head or self.finished:
            return  # a trailer, or past an error
        self._size += len(name) + len(value) + _LINE_OVERHEAD
        if self._size > self._max_head_bytes:
            self._fail(431, f"the request head exceeds {self._max_head_bytes} bytes")
            return
        if len(self._headers) >= MAX_HEADERS:
            self._fail(431, f"the request head has more than {MAX_HEADERS} fields")
            return
        name = name.lower()
        if value[-1:] in (b" ", b"\t"):
            value = value.rstrip(b" \t")
        self._headers.append((name, value))
        if name == b"host":
            self._hosts += 1
        elif name == b"connection":
            self._close_token = self._close_token or has_token(value, b"close")
        elif name == b"expect":
            self._expect = value.lower() == b"100-continue"

    def on_headers_complete(self) -> None:
        if self.finished:
            return
        self.in_head = False
        parser = self._parser
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            # llhttp reads a request line without a version as HTTP/0.9: malformed here
            if version == "0.9":
                self._fail(400, "the request line has no HTTP version")
            else:
                self._fail(505, "the HTTP version is not 1.0 or 1.1")
            return
        if version == "1.1" and self._hosts != 1:
            self._fail(400, "an HTTP/1.1 request needs exactly one Host")  # RFC 9112 §3.2
            return
        upgrade = parser.should_upgrade()
        keep_alive = version == "1.1" and not self._close_token and not upgrade
        self.in_body = True
        self.events.append(
            (
                HEAD,
                RequestHead(
                    parser.get_method().decode("ascii"),
                    self._target,
                    version,
                    self._headers,
                    keep_alive,
                    self._expect and version == "1.1",
                ),
            )
        )
        self._last = not keep_alive

    def on_body(self, body: bytes) -> None:
        if self.in_body and not self.finished:
            self._pieces.append(body)
            self._body_fed += len(body)
            self._chunk_open = False

    def on_chunk_header(self) -> None:
        self._chunks += 1
        self._chunk_open = True

    def on_chunk_complete(self) -> None:
        self._chunk_open = False

    def on_message_complete(self) -> None:
        if not self.in_body or self.finished:
            return
        self.in_body = False
        self._ends += 1
        if self._pieces:
            self._flush()
        self.events.append((END, None))
        if self._last:
            self.finished = True  # the connection ends with this request's response
