"""Where a relayed answer ends, sans-I/O: an owner's HTTP/1.1 response
parsed just enough to pass its bytes on unchanged.

The early forward (``_early``) relays an owner's answer to the client as
bytes, its framing included (a chunked body stays chunked), so it needs no
body parser: only the head (status, header fields) and the end of the body,
to keep both keep-alive connections in step. ``AnswerFraming`` is fed the
owner's bytes as they come and says which of them belong to the answer.
Not llhttp (``_peers.Answer`` reads proxied answers with it) nor h11: both
hand on the body de-chunked and neither says at which byte of what it was
fed an answer ended, which passing the bytes on unchanged needs.

Strict where h11 (the oracle the tests hold it to) is lenient, never the
other way: every answer accepted here is one h11 reads the same (status,
fields, and the byte its body ends at), so nothing past an answer's end is
ever passed on as part of it. Refused (``FramingError``), where h11 might
accept: lines not ending in CRLF, folded header lines, HTTP versions other
than 1.0 and 1.1, informational (1xx) answers, a comma list or a repeat of
``Content-Length``, ``Transfer-Encoding`` other than one ``chunked`` and
together with ``Content-Length``, a chunk size of more than 16 hex digits,
and bytes past the answer's end. Bounds: the head at most ``MAX_HEAD``
bytes, a chunk's size line or a trailer line at most ``MAX_LINE``.
"""

from __future__ import annotations

import re
from typing import Final, final

MAX_HEAD: Final = 64 * 1024
"""Bytes of an answer's head (status line and fields)."""
MAX_LINE: Final = 4096
"""Bytes of a chunk-size line (with its extensions) or of a trailer field."""

# How the body is framed.
NONE: Final = 0  # HEAD, 204, 304: no body whatever the head says
LENGTH: Final = 1  # Content-Length
CHUNKED: Final = 2  # Transfer-Encoding: chunked
UNTIL_CLOSE: Final = 3  # neither: the connection's end ends it

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([ \t\x21-\x7e\x80-\xff]*))?")
_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*"
    rb"((?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?)[ \t]*"
)
"""A field line (RFC 9110 §5.5; h11's own expression)."""
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[\t\x20-\x7e\x80-\xff]*)?[ \t]*")
_DIGITS = re.compile(rb"[0-9]{1,18}")

# Where a chunked body's scan is.
_SIZE: Final = 0  # in a chunk-size line
_DATA: Final = 1  # in a chunk's data (``_left`` bytes to go)
_DATA_END: Final = 2  # at the CRLF after a chunk's data (``_left`` of its 2 bytes to go)
_TRAILER: Final = 3  # in the trailer section, after the last chunk


class FramingError(ValueError):
    """The owner's bytes are not an answer this relay passes on."""


@final
class AnswerHead:
    """An answer's head as it came: status, fields in order, and how its body is framed."""

    __slots__ = ("close", "fields", "framing", "length", "reason", "status", "version")

    def __init__(
        self,
        version: bytes,
        status: int,
        reason: bytes,
        fields: list[tuple[bytes, bytes]],
        framing: int,
        length: int,
        close: bool,
    ) -> None:
        self.version = version
        """``b"1.1"`` or ``b"1.0"``."""
        self.status = status
        self.reason = reason
        self.fields = fields
        """Names and values as sent (the names' case kept)."""
        self.framing = framing
        self.length = length
        """The body's length for ``LENGTH``."""
        self.close = close
        """The connection ends after this answer (``Connection: close``, HTTP/1.0,
        or a body the close ends): it is not used again."""


@final
class AnswerFraming:
    """Feed it one answer's bytes (``feed``); it says which belong to its body."""

    __slots__ = ("_buffer", "_left", "_line", "_state", "done", "head", "head_only")

    def __init__(self, *, head_only: bool = False) -> None:
        self.head_only = head_only
        """The answer is to a HEAD request: no body follows its head."""
        self.head: AnswerHead | None = None
        """Set once the head is whole."""
        self.done = False
        """The answer is whole."""
        self._buffer = b""
        """The head so far, until it is whole."""
        self._line = b""
        """A chunk-size or trailer line so far, until its CRLF."""
        self._state = _SIZE
        self._left = 0

    def feed(self, data: bytes | bytearray) -> bytes:
        """The answer's body bytes in ``data`` (raw: a chunked body's framing
        included); the head is kept until whole, then ``head`` is set.
        ``data`` empty: the connection ended (the end of an ``UNTIL_CLOSE``
        body, else ``FramingError``). Bytes past the answer's end are a
        ``FramingError`` (nothing was asked of the owner after it)."""
        if type(data) is not bytes:
            data = bytes(data)
        if self.head is None:
            if not data:
                raise FramingError("the connection closed inside the answer's head")
            self._buffer += data
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise FramingError(f"the answer's head exceeds {MAX_HEAD} bytes")
                return b""
            if end + 4 > MAX_HEAD:
                raise FramingError(f"the answer's head exceeds {MAX_HEAD} bytes")
            buffered, self._buffer = self._buffer, b""
            self.head = self._parse_head(buffered[:end])
            data = buffered[end + 4 :]
            if self.head.framing == NONE:
                self.done = True
            elif self.head.framing == LENGTH:
                self._left = self.head.length
                self.done = self._left == 0
            if not data:
                return b""
        if self.done:
            if data:
                raise FramingError("bytes came past the answer's end")
            return b""
        framing = self.head.framing
        if not data:
            if framing == UNTIL_CLOSE:
                self.done = True
                return b""
            raise FramingError("the connection closed inside the answer's body")
        if framing == UNTIL_CLOSE:
            return data
        if framing == LENGTH:
            if len(data) > self._left:
                raise FramingError("bytes came past the answer's end")
            self._left -= len(data)
            self.done = self._left == 0
            return data
        end = self._scan(data)
        if end < len(data):
            raise FramingError("bytes came past the answer's end")
        return data

    def _parse_head(self, head: bytes) -> AnswerHead:
        lines = head.split(b"\r\n")
        matched = _STATUS_LINE.fullmatch(lines[0])
        if matched is None:
            raise FramingError(f"malformed status line {lines[0][:80]!r}")
        minor, code, reason = matched.groups()
        status = int(code)
        if status < 200:
            raise FramingError(f"an informational answer ({status}) is not relayed")
        fields: list[tuple[bytes, bytes]] = []
        length = -1
        chunked = False
        close = minor == b"0"
        for line in lines[1:]:
            field = _FIELD.fullmatch(line)
            if field is None:
                raise FramingError(f"malformed header line {line[:80]!r}")
            name, value = field.groups()
            fields.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                if length >= 0 or _DIGITS.fullmatch(value) is None:
                    raise FramingError(f"a Content-Length this relay does not take: {value!r}")
                length = int(value)
            elif lower == b"transfer-encoding":
                if chunked or value.lower() != b"chunked":
                    raise FramingError(f"a Transfer-Encoding this relay does not take: {value!r}")
                chunked = True
            elif lower == b"connection":
                close = close or any(t.strip() == b"close" for t in value.lower().split(b","))
        if chunked and length >= 0:
            raise FramingError("both Transfer-Encoding and Content-Length")
        if self.head_only or status in (204, 304):
            framing = NONE
        elif chunked:
            framing = CHUNKED
        elif length >= 0:
            framing = LENGTH
        else:
            framing, close = UNTIL_CLOSE, True
        return AnswerHead(
            b"1." + minor, status, reason or b"", fields, framing, max(length, 0), close
        )

    def _scan(self, data: bytes) -> int:
        """Follow a chunked body through ``data``; where the body ends in it
        (``len(data)`` if it does not end there)."""
        at, size = 0, len(data)
        state, left = self._state, self._left
        while at < size:
            if state == _DATA:
                step = min(left, size - at)
                at += step
                left -= step
                if not left:
                    state, left = _DATA_END, 2
            elif state == _DATA_END:
                expected = b"\r\n"[2 - left]
                if data[at] != expected:
                    raise FramingError("a chunk's data is not followed by CRLF")
                at += 1
                left -= 1
                if not left:
                    state = _SIZE
            else:  # a line: a chunk's size, or a trailer field
                if self._line[-1:] == b"\r" and data[at : at + 1] == b"\n":
                    line, at = self._line[:-1], at + 1  # its CRLF straddled two reads
                else:
                    end = data.find(b"\r\n", at)
                    if end < 0:
                        self._line += data[at:]
                        if len(self._line) > MAX_LINE:
                            raise FramingError(f"a chunked body's line exceeds {MAX_LINE} bytes")
                        at = size
                        break
                    line, at = self._line + data[at:end], end + 2
                self._line = b""
                if len(line) > MAX_LINE:
                    raise FramingError(f"a chunked body's line exceeds {MAX_LINE} bytes")
                if state == _SIZE:
                    matched = _CHUNK_SIZE.fullmatch(line)
                    if matched is None:
                        raise FramingError(f"malformed chunk-size line {line[:80]!r}")
                    left = int(matched.group(1), 16)
                    state = _DATA if left else _TRAILER
                elif not line:  # the empty line after the trailer fields: the end
                    self.done = True
                    self._state, self._left = state, left
                    return at
                elif _FIELD.fullmatch(line) is None:
                    raise FramingError(f"malformed trailer line {line[:80]!r}")
        self._state, self._left = state, left
        return at
