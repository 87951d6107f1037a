"""How ``agentik.server.http._connection`` frames what an app sends (RFC 9112 §6), read
back by h11 as a client would: the length a response declares is the length
it has, a head cannot carry a line the app did not mean (no header
injection), and an app that breaks its own framing ends the connection
without breaking the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.test_http11 import CLOSE, Running, exchange, get, responses, start


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/status/{code}`` answers ``code`` with a 5-byte body and its length;
    ``/stream`` three pieces without a length; ``/header?{hex}`` a header
    whose value is the bytes ``hex`` names; ``/long`` and ``/short`` a body
    that does not match its Content-Length."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path.startswith("/status/"):
        status = int(path.removeprefix("/status/"))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-length", b"5")],
            }
        )
        await send({"type": "http.response.body", "body": b"hello"})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (b"one ", b"", b"two ", b"three"):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/header":
        value = bytes.fromhex(scope["query_string"].decode())
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"x-value", value), (b"content-length", b"2")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})
    elif path in ("/long", "/short"):
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]}
        )
        body = b"12345" if path == "/long" else b"123"
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[Running]:
    running = await start(nursery, app)
    yield running
    running.stop.set()


async def test_a_stream_is_chunked_on_1_1_and_ends_with_the_close_on_1_0(
    server: Running, clock: trio.testing.MockClock
) -> None:
    chunked = await exchange(server.port, get("/stream", CLOSE))
    assert b"\r\ntransfer-encoding: chunked\r\n" in chunked
    assert responses(chunked, "GET") == [(200, b"one two three")]
    old = await exchange(server.port, b"GET /stream HTTP/1.0\r\n\r\n")
    head, _, body = old.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"content-length" not in head
    assert b"\r\nconnection: close" in head
    assert body == b"one two three"  # the close is the end


@pytest.mark.parametrize("status", [204, 304])
async def test_no_body_goes_out_where_none_may(
    server: Running, status: int, clock: trio.testing.MockClock
) -> None:
    received = await exchange(server.port, get(f"/status/{status}") + get("/status/200", CLOSE))
    assert b"hello" in received  # the 200 after it
    assert received.count(b"hello") == 1
    assert responses(received, "GET", "GET") == [(status, b""), (200, b"hello")]


async def test_head_gets_the_length_and_no_body(
    server: Running, clock: trio.testing.MockClock
) -> None:
    received = await exchange(
        server.port, b"HEAD /status/200 HTTP/1.1\r\nHost: t\r\n\r\n" + get("/status/200", CLOSE)
    )
    assert received.count(b"hello") == 1
    assert received.count(b"content-length: 5") == 2
    assert responses(received, "HEAD", "GET") == [(200, b""), (200, b"hello")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.binary(min_size=1, max_size=12))
def test_a_header_value_cannot_add_a_line(value: bytes) -> None:
    """Any bytes an app puts in a header value: the response carries them as
    the one header, or the app's response is refused with a 500 (a value
    with a line break, a NUL, other control bytes or surrounding space):
    never a header or body the app did not send."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            server = await start(nursery, app)
            received = await exchange(server.port, get(f"/header?{value.hex()}", CLOSE))
            client = h11.Connection(h11.CLIENT)
            client.send(h11.Request(method="GET", target="/", headers=[("Host", "t")]))
            client.receive_data(received)
            response = client.next_event()
            assert isinstance(response, h11.Response), received
            if response.status_code == 200:
                names = [name for name, _ in response.headers]
                assert names.count(b"x-value") == 1, received
                assert dict(response.headers)[b"x-value"] == value
                assert names == [b"x-value", b"content-length", b"connection", b"date", b"server"]
            else:
                assert response.status_code == 500
                assert b"x-value" not in received
            server.stop.set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))


@pytest.mark.parametrize("path", ["/long", "/short"])
async def test_a_body_that_breaks_its_length_ends_the_connection(
    server: Running, path: str, clock: trio.testing.MockClock
) -> None:
    """The app's error: nothing of a response it framed wrong reaches the
    client (the head waits for the body), the connection closes, and the
    server answers the next client."""
    received = await exchange(server.port, get(path) + get("/status/200"))
    assert b"12345" not in received and b"hello" not in received
    assert responses(await exchange(server.port, get("/status/200", CLOSE)), "GET") == [
        (200, b"hello")
    ]
