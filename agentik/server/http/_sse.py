"""Server-sent events framing: one JSON object per ``data:`` line, frames end in a blank line.

JSON is compact and never contains a raw newline (``json.dumps`` escapes
them), so a frame is always exactly one ``data:`` line, which is what the
AG-UI and A2A clients parse. JSON may hold U+0085, U+2028 and U+2029 raw,
and many clients split lines there too (Python's ``str.splitlines``, httpx's
``aiter_lines``), so those three are escaped as well.

``EventStream`` is the streaming response every protocol sends its frames
through: heartbeats while nothing else goes out, and an end that always
runs its ``close``, whichever way the stream ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from agentik._json import JsonValue, dumps_compact
from agentik.server.http._framing import Receive, Scope, Send

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


HEARTBEAT = b": keep-alive\n\n"
"""An SSE comment, alone in its block: every client skips it (a comment line,
then a blank line that ends no event), and a client that splits the stream
at blank lines sees a block of its own, never a comment glued to an event."""


class EventStream:
    """An ASGI response streaming SSE frames until they end or the client leaves.

    With ``heartbeat`` seconds (``[server] sse_heartbeat``), a stream that has
    sent nothing for that long sends ``HEARTBEAT``, so proxies and browsers
    that drop idle connections keep it while a slow model thinks. Frames and
    heartbeats go out one whole ASGI message each, under one lock: a heartbeat
    never lands inside a frame, nor after the end. ``close`` always runs,
    shielded, whichever way the stream ends."""

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        close: Callable[[], Awaitable[object]],
        *,
        heartbeat: float | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.frames = frames
        self.close = close
        self.heartbeat = heartbeat
        self.headers = {"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        *((k.encode(), v.encode()) for k, v in self.headers.items()),
                    ],
                }
            )
            async with trio.open_nursery() as nursery:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch_disconnect)
                if self.heartbeat is None:
                    async for frame in self.frames:
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                else:
                    await _send_beating(self.frames, send, self.heartbeat, nursery)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self.close()


async def _send_beating(
    frames: AsyncIterator[bytes], send: Send, interval: float, nursery: trio.Nursery
) -> None:
    """Send ``frames`` and then the end, with a heartbeat after each ``interval``
    seconds in which nothing was sent. The heartbeat task runs in ``nursery``;
    the caller cancels it once this returns."""
    lock = trio.Lock()  # one ASGI message at a time: never a heartbeat mid-frame
    due = trio.current_time() + interval

    async def beat() -> None:
        nonlocal due
        while True:
            await trio.sleep_until(due)
            async with lock:
                if trio.current_time() >= due:  # no frame went out meanwhile
                    await send({"type": "http.response.body", "body": HEARTBEAT, "more_body": True})
                    due = trio.current_time() + interval

    nursery.start_soon(beat)
    async for frame in frames:
        async with lock:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            due = trio.current_time() + interval
    async with lock:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
