"""Whatever bytes a client sends, a connection holds at most its head bound,
its body bound and a constant (``HELD_BOUND``): no byte accumulates without
a limit.

Each example serves one ``_connection.Connection`` on a real TCP socket on
127.0.0.1 and has a client stream bytes into it, piece by piece; after every
piece, once the server is idle, the Python memory allocated since the
connection began (tracemalloc: what its buffers, the parser's and llhttp's
partial lines, queued events and the app's body pieces hold; not process
RSS) is measured. Streams are arbitrary bytes, and mostly valid streams with
one thing pushed far past its bound: a trailer, chunk extensions, zeros
before a chunk size, a header value, header fields, a target, line breaks
between requests, many small chunks, pipelined requests, a large body,
bytes after an HTTP/1.0 request without a length, after an ``Upgrade``,
after ``Connection: close``. Two
apps: one reads and drops the body, one never reads it (backpressure).

Before the fix, a trailer streamed after the last chunk was held whole (107
MiB in 92 s, from outside); tiny pipelined requests and 1-byte chunks held
objects many times their bytes.
"""

from __future__ import annotations

import contextlib
import socket
import tracemalloc
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.server.http import HttpSettings
from agentik.server.http._connection import BODY_BUFFER, Connection
from agentik.server.http._framing import ResponseHeaders
from agentik.server.http._socket_io import MAX_RECV

HEAD_LIMIT = 4096
HELD_BOUND = HEAD_LIMIT + BODY_BUFFER + 3 * MAX_RECV
"""The head bound, the body bound (what is read ahead of the app), and a
constant: a read, the events parsed from part of one, and the connection's
own objects (tasks, scopes, the scope dict)."""
SETTINGS = HttpSettings(keep_alive_timeout=5.0, max_head_bytes=HEAD_LIMIT)


async def reading_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the body, keeping none of it, then answers."""
    while (message := await receive())["type"] == "http.request":
        if not message.get("more_body"):
            break
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


async def holding_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Never reads and never answers: the body waits, the next requests too."""
    await trio.sleep_forever()


APPS = {"reading": reading_app, "holding": holding_app}


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Both ends of a TCP connection on 127.0.0.1, non-blocking."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    server.setblocking(False)
    client.setblocking(False)
    return server, client


async def most_held(app: Any, stream: bytes, piece: int) -> int:
    """The most memory held while ``stream`` goes to a connection ``piece``
    bytes at a time (until the server stops reading or closes)."""
    server_sock, client_sock = tcp_pair()
    connection = Connection(app, server_sock, SETTINGS, trio.Event(), ResponseHeaders())
    view = memoryview(stream)  # pieces are views: the client allocates nothing
    held = 0
    base = tracemalloc.get_traced_memory()[0]

    async def read_answers() -> None:
        with contextlib.suppress(OSError):
            while await trio.socket.from_stdlib_socket(client_sock).recv(MAX_RECV):
                pass

    async def send(data: memoryview) -> bool:
        """Send it all; False once the server stops reading (or has closed).
        The stdlib socket, not trio's: a cancel scope per piece would grow
        trio's deadline heap, which the measure would count."""
        while data:
            try:
                data = data[client_sock.send(data) :]
            except BlockingIOError:
                await trio.testing.wait_all_tasks_blocked()  # the server reads what it will
                try:
                    data = data[client_sock.send(data) :]
                except BlockingIOError:
                    return False  # still full: the server stopped reading
            except OSError:
                return False
        return True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        nursery.start_soon(read_answers)
        for start in range(0, len(view), piece):
            sent = await send(view[start : start + piece])
            await trio.testing.wait_all_tasks_blocked()
            held = max(held, tracemalloc.get_traced_memory()[0] - base)
            if not sent:
                break
        await trio.sleep(60)  # the deadlines pass: a 408, or the keep-alive ends
        await trio.testing.wait_all_tasks_blocked()
        held = max(held, tracemalloc.get_traced_memory()[0] - base)
        nursery.cancel_scope.cancel()
    client_sock.close()
    return held


def held_by(app: str, stream: bytes, piece: int) -> int:
    tracemalloc.start()
    try:
        return trio.run(
            most_held, APPS[app], stream, piece, clock=trio.testing.MockClock(autojump_threshold=0)
        )
    finally:
        tracemalloc.stop()


# --- streams ----------------------------------------------------------------------

CHUNKED = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
TINY = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
MiB = 1024 * 1024


def fixed(size: int) -> bytes:
    return b"POST /f HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size


FLOODS = {
    # each: the bytes before the flood, the unit repeated
    "trailer-value": (CHUNKED + b"3\r\nabc\r\n0\r\nX-Flood: ", b"a"),
    "trailer-fields": (CHUNKED + b"0\r\n", b"x-a: b\r\n"),
    # 100,000 chunks allow 3.2 MB of framing in all; the trailer has its own bound
    "trailer-after-chunks": (CHUNKED + b"1\r\nx\r\n" * 100_000 + b"0\r\nX-Flood: ", b"a"),
    "chunk-extension": (CHUNKED + b"3;x=", b"a"),
    "extensions": (CHUNKED + b"3", b";a=b"),
    "size-zeros": (CHUNKED, b"0"),
    "small-chunks": (CHUNKED, b"1\r\nx\r\n"),
    "header-value": (b"GET / HTTP/1.1\r\nHost: t\r\nX-Flood: ", b"a"),
    "header-fields": (b"GET / HTTP/1.1\r\nHost: t\r\n", b"a:b\r\n"),
    "target": (b"GET /", b"a"),
    "line-breaks": (TINY, b"\r\n"),
    "pipelined": (b"", TINY),
    "pipelined-bodies": (b"", fixed(1) + b"x"),
    "fixed-body": (fixed(64 * MiB), b"b"),
    "http-1.0-body": (b"POST /old HTTP/1.0\r\n\r\n", b"b"),  # no length: no body, the end
    "upgrade": (b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", b"w"),
    "after-close": (b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", b"z"),
    "chunked-body": (CHUNKED, b"4000\r\n" + b"c" * 0x4000 + b"\r\n"),
}


@st.composite
def floods(draw: st.DrawFn) -> bytes:
    """A mostly valid stream: maybe some valid requests, then one flood of up
    to 3 MiB, maybe with a few odd bytes in it."""
    before = draw(st.lists(st.sampled_from([TINY, fixed(3) + b"abc", CHUNKED + b"0\r\n\r\n"])))
    start, unit = FLOODS[draw(st.sampled_from(sorted(FLOODS)))]
    size = draw(st.integers(1, 3 * MiB))
    stream = b"".join(before) + start + unit * max(1, size // len(unit))
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(stream)))
        stream = stream[:at] + draw(st.binary(min_size=1, max_size=4)) + stream[at:]
    return stream


BOUNDED = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@BOUNDED
@given(
    app=st.sampled_from(sorted(APPS)),
    stream=floods(),
    piece=st.sampled_from([1000, 16 * 1024, MAX_RECV, 4 * MAX_RECV]),
)
def test_a_mostly_valid_stream_holds_a_bounded_amount(app: str, stream: bytes, piece: int) -> None:
    held = held_by(app, stream, piece)
    assert held <= HELD_BOUND, f"{held} bytes held (bound {HELD_BOUND})"


@BOUNDED
@given(
    app=st.sampled_from(sorted(APPS)),
    unit=st.binary(min_size=1, max_size=64),
    repeat=st.integers(1, 20_000),
    piece=st.sampled_from([7, 1000, MAX_RECV]),
)
def test_any_bytes_hold_a_bounded_amount(app: str, unit: bytes, repeat: int, piece: int) -> None:
    held = held_by(app, unit * repeat, piece)
    assert held <= HELD_BOUND, f"{held} bytes held (bound {HELD_BOUND})"


def test_every_flood_was_measured() -> None:
    """Each flood, 3 MiB of it, on each app: under the bound (not left to the search)."""
    for name, (start, unit) in FLOODS.items():
        for app in APPS:
            held = held_by(app, start + unit * (3 * MiB // len(unit)), MAX_RECV)
            assert held <= HELD_BOUND, f"{name} on the {app} app: {held} bytes held"


def test_a_body_sent_a_few_bytes_per_packet_is_bounded() -> None:
    """Each read is a piece of 16 bytes: the pieces count with their cost as
    objects against the body bound, not only their bytes."""
    held = held_by("holding", fixed(MiB) + b"b" * (400 * 1024), 16)
    assert held <= HELD_BOUND, f"{held} bytes held (bound {HELD_BOUND})"
