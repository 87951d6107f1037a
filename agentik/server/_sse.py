"""Server-sent events framing: one JSON object per ``data:`` line, frames end in a blank line.

JSON is compact and never contains a raw newline (``json.dumps`` escapes
them), so a frame is always exactly one ``data:`` line, which is what the
AG-UI and A2A clients parse.
"""

from __future__ import annotations

import json

from agentik._json import JsonValue

SSE_MEDIA_TYPE = "text/event-stream"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""One encoder, reused: ``json.dumps`` with options builds a new one per call."""


def dumps(value: JsonValue) -> str:
    """Compact JSON text, UTF-8 kept as is."""
    return _ENCODER.encode(value)


def sse_frame(data: JsonValue, *, event: str | None = None) -> bytes:
    """One SSE frame carrying ``data`` as JSON, optionally named ``event``."""
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {dumps(data)}\n\n".encode()
