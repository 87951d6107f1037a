"""How a response goes on the wire: the ASGI types, status and header lines
checked and built, the ``Date``/``Server`` lines, and the ways a body is framed.

Leaf module of the engine: ``_cycle`` frames each response with it and
``_connection`` writes what it frames; neither needs the other's state here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final, final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STATUS_LINES = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
    for status in HTTPStatus
}
CLOSE = (b"connection", b"close")

_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110 §5.1)."""
_FIELD_VALUE = re.compile(
    rb"(?:[\x21-\x7e\x80-\xff](?:[ \t\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?"
)
"""A header value (RFC 9110 §5.5): no line break, no NUL, no surrounding space."""

# How a response's body is framed.
NO_BODY: Final = 0  # HEAD, 1xx, 204, 304: the head says what a body would be; none is sent
FIXED: Final = 1  # Content-Length
CHUNKED: Final = 2  # Transfer-Encoding: chunked (HTTP/1.1, no Content-Length)
TO_CLOSE: Final = 3  # HTTP/1.0 without Content-Length: the close ends the body


def status_line(status: object) -> bytes:
    line: bytes | None = STATUS_LINES.get(status)  # type: ignore[call-overload]
    if line is not None:
        return line
    if type(status) is not int or not 100 <= status <= 999:
        raise RuntimeError(f"ASGI 'http.response.start' with status {status!r}")
    return b"HTTP/1.1 %d \r\n" % status


def header_line(name: bytes, value: bytes) -> bytes:
    if _TOKEN.fullmatch(name) is None:
        raise RuntimeError(f"invalid response header name {name!r}")
    if _FIELD_VALUE.fullmatch(value) is None:
        raise RuntimeError(f"invalid value for response header {name!r}: {value!r}")
    return name + b": " + value + b"\r\n"


@final
class ResponseHeaders:
    """The ``Date`` and ``Server`` header lines of every response, as they go
    on the wire, built once a second (``Date`` has a resolution of one
    second, so the bytes are the same)."""

    __slots__ = ("_lines", "_second", "_server")

    def __init__(self, server: bytes = b"agentik") -> None:
        self._server = server
        self._second = -1
        self._lines = b""

    def __call__(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            date = formatdate(second, usegmt=True).encode()
            self._lines = b"date: " + date + b"\r\nserver: " + self._server + b"\r\n"
            self._second = second
        return self._lines
