"""Server-sent events framing: one JSON object per ``data:`` line, frames end in a blank line.

JSON is compact and never contains a raw newline (``json.dumps`` escapes
them), so a frame is always exactly one ``data:`` line, which is what the
AG-UI and A2A clients parse. JSON may hold U+0085, U+2028 and U+2029 raw,
and many clients split lines there too (Python's ``str.splitlines``, httpx's
``aiter_lines``), so those three are escaped as well.
"""

from __future__ import annotations

from agentik._json import JsonValue, dumps_compact

_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
"""What ``str.splitlines`` breaks at beyond what JSON already escapes."""


def dumps(value: JsonValue) -> str:
    """Compact JSON text, UTF-8 kept as is but for the line breaks JSON allows raw."""
    text = dumps_compact(value)
    return text if text.isascii() else text.translate(_LINE_BREAKS)


def sse_frame(data: JsonValue, *, event: str | None = None) -> bytes:
    """One SSE frame carrying ``data`` as JSON, optionally named ``event``."""
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {dumps(data)}\n\n".encode()
