"""A sans-I/O decoder for server-sent events: text lines in, event data out.

Follows the WHATWG rules a Chat Completions stream relies on: ``data:`` lines
(one optional space after the colon is dropped) accumulate, joined by
newlines, until a blank line dispatches the event; comment lines (``:``) and
the ``event``, ``id`` and ``retry`` fields are ignored. An event that is not
closed by a blank line is never dispatched, so a stream cut mid-event yields
nothing half-received.
"""

from __future__ import annotations

import attrs


@attrs.define
class SSEDecoder:
    """Feed it the stream's lines (without line endings), one at a time."""

    _data: list[str] = attrs.field(factory=list, init=False)
    _has_data: bool = attrs.field(default=False, init=False)

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
