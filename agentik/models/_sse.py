"""A sans-I/O decoder for server-sent events: text in, event data out.

Follows the WHATWG rules a Chat Completions stream relies on: lines end at
CRLF, LF or CR, and nowhere else (not at U+2028, U+2029 or U+0085, which
``str.splitlines`` and so httpx's ``aiter_lines`` also split at, but which a
JSON string may hold raw); ``data:`` lines (one optional space after the
colon is dropped) accumulate, joined by newlines, until a blank line
dispatches the event; comment lines (``:``) and the ``event``, ``id`` and
``retry`` fields are ignored. An event that is not closed by a blank line is
never dispatched, so a stream cut mid-event yields nothing half-received.
"""

from __future__ import annotations

import re

import attrs

_LINE_END = re.compile(r"\r\n|\r|\n")


@attrs.define
class SSEDecoder:
    """Feed it the stream's text as it arrives (``feed``), or its lines
    without their endings (``feed_line``)."""

    _data: list[str] = attrs.field(factory=list, init=False)
    _has_data: bool = attrs.field(default=False, init=False)
    _partial: str = attrs.field(default="", init=False)
    """The start of a line whose end has not arrived."""
    _after_cr: bool = attrs.field(default=False, init=False)
    """The text so far ended in CR: a LF next is the rest of that line end."""

    def feed(self, text: str) -> list[str]:
        """Take the next piece of the stream's text; return the data of the
        events it completes."""
        if not text:
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        buffer = self._partial + text if self._partial else text
        if "\r" in buffer:
            self._after_cr = buffer.endswith("\r")
            *lines, self._partial = _LINE_END.split(buffer)
        else:  # the usual LF-only stream: str.split is several times faster
            self._after_cr = False
            *lines, self._partial = buffer.split("\n")
        events = []
        for line in lines:
            data = self.feed_line(line)
            if data is not None:
                events.append(data)
        return events

    def feed_line(self, line: str) -> str | None:
        """Take one line; return the data of the event it completes, if any."""
        if line == "":
            if not self._has_data:
                return None
            data = "\n".join(self._data)
            self._data.clear()
            self._has_data = False
            return data
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
            self._has_data = True
        return None
