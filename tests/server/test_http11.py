"""Conformance of agentik's HTTP/1.1 server (``agentik.server.http._connection``,
``_serve``) as a client sees it: keep-alive, pipelining, chunked bodies
both ways, ``Expect: 100-continue``, HEAD and HTTP/1.0, backpressure on a body
the app does not read, a client that leaves, app failures, the lifespan
protocol, and bytes h11 cannot parse (400 or 431, and the server stays up).

A real server on 127.0.0.1 in the test's trio run, an echo app, and real
clients: httpx2, or a raw socket whose bytes the test writes itself. Time is
trio's mock clock (it jumps after 50 ms of real idleness).
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from collections.abc import AsyncIterator
from email.utils import formatdate
from types import SimpleNamespace
from typing import Any

import attrs
import h11
import httpx2
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.server.http import REFUSED, HttpSettings
from agentik.server.http._connection import BODY_BUFFER
from agentik.server.http._framing import ResponseHeaders
from agentik.server.http._serve import serve


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


@attrs.define
class EchoApp:
    """``/echo`` answers the body with Content-Length; ``/chunks`` answers it in
    three chunks (no Content-Length); ``/hold`` waits for ``release`` before
    reading; ``/refuse`` answers 413 without reading; ``/fail`` raises;
    ``/state`` answers the lifespan state. Records what it saw."""

    release: trio.Event = attrs.Factory(trio.Event)
    clients: list[tuple[str, int]] = attrs.Factory(list)
    received: list[dict[str, Any]] = attrs.Factory(list)
    """The messages after the body, for ``/hold`` (http.disconnect, or none)."""
    cancelled: int = 0
    lifespan: list[str] = attrs.Factory(list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                self.lifespan.append(message["type"])
                scope["state"]["greeting"] = "hello"
                await send({"type": "lifespan.startup.complete"})
            self.lifespan.append(message["type"])
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.clients.append(scope["client"])
        path = scope["path"]
        if path == "/fail":
            raise RuntimeError("the app failed")
        if path == "/refuse":  # as agentik's guard does: the body is not read
            await answer(send, 413, b"too large", _CLOSE)
            return
        if path == "/state":
            await answer(send, 200, scope["state"]["greeting"].encode())
            return
        if path == "/hold":
            try:
                await self.release.wait()
            except trio.Cancelled:
                self.cancelled += 1
                raise
        pieces = []  # joined once: a 64 MiB body comes in many pieces
        while (message := await receive())["type"] == "http.request":
            pieces.append(message["body"])
            if not message.get("more_body"):
                break
        body = b"".join(pieces)
        if path == "/chunks":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for i in range(3):
                piece = body[i * len(body) // 3 : (i + 1) * len(body) // 3]
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        await answer(send, 200, b"%d:%s" % (len(body), body[:64]))


_CLOSE = (b"connection", b"close")


async def answer(send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]) -> None:
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@attrs.frozen
class Running:
    port: int
    app: EchoApp
    stop: trio.Event

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def start(nursery: trio.Nursery, app: Any = None) -> Running:
    app, stop = app or EchoApp(), trio.Event()
    binds = await nursery.start(
        lambda task_status: serve(
            app,
            settings=HttpSettings(keep_alive_timeout=5.0, max_head_bytes=4096),
            shutdown_trigger=stop.wait,
            task_status=task_status,
        )
    )
    return Running(int(binds[0].rsplit(":", 1)[1]), app, stop)


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[Running]:
    running = await start(nursery)
    yield running
    running.stop.set()


async def exchange(port: int, data: bytes, *, limit: float = 5.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    received = b""
    with trio.fail_after(limit):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            try:
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:  # a reset after the answer
                pass
    return received


def responses(data: bytes, *methods: str) -> list[tuple[int, bytes]]:
    """The responses in ``data`` (to requests of ``methods``), parsed with h11."""
    client = h11.Connection(h11.CLIENT)
    client.receive_data(data)
    found = []
    for method in methods:
        client.send(h11.Request(method=method, target="/", headers=[("Host", "t")]))
        client.send(h11.EndOfMessage())
        event = client.next_event()
        while isinstance(event, h11.InformationalResponse):
            event = client.next_event()
        assert isinstance(event, h11.Response), event
        body = b""
        while not isinstance(part := client.next_event(), h11.EndOfMessage):
            assert isinstance(part, h11.Data), part
            body += part.data
        found.append((event.status_code, body))
        if client.our_state is h11.DONE and client.their_state is h11.DONE:
            client.start_next_cycle()
    return found


def get(target: str, *extra: bytes) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (target.encode(), b"".join(extra))


def post(target: str, body: bytes, *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n" % (target.encode(), len(body))
    return head + b"".join(extra) + b"\r\n" + body


CLOSE = b"Connection: close\r\n"


async def test_requests_on_one_keep_alive_connection(
    server: Running, clock: trio.testing.MockClock
) -> None:
    """httpx2 reuses the connection: every request comes from the same port."""
    async with httpx2.AsyncClient(base_url=server.url) as client:
        for i in range(5):
            response = await client.post("/echo", content=b"x" * i)
            assert (response.status_code, response.content) == (200, b"%d:%s" % (i, b"x" * i))
            assert response.headers["server"] == "agentik"
            assert response.headers["date"].endswith(" GMT")
    assert len(set(server.app.clients)) == 1


async def test_a_request_sent_as_the_last_response_arrives(
    server: Running, clock: trio.testing.MockClock
) -> None:
    """The client (a thread with a blocking socket, so it runs beside the
    server) sends each request the moment it has read the previous response:
    a request can arrive while the server is still finishing the response
    before it (between its write and its bookkeeping)."""

    def client() -> int:
        answered = 0
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            for i in range(300):
                sock.sendall(post("/echo", b"%d" % i))
                received = b""
                while not received.endswith(b":%d" % i):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return answered
                    received += chunk
                answered += 1
        return answered

    assert await trio.to_thread.run_sync(client) == 300
    assert len(set(server.app.clients)) == 1


async def test_pipelined_requests_with_chunked_bodies(
    server: Running, clock: trio.testing.MockClock
) -> None:
    chunked = (
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n5;ext=1\r\ndefgh\r\n0\r\nTrailer: x\r\n\r\n"
    )
    data = chunked + post("/echo", b"fixed") + chunked + get("/echo", CLOSE)
    received = await exchange(server.port, data)
    assert responses(received, "POST", "POST", "POST", "GET") == [
        (200, b"8:abcdefgh"),
        (200, b"5:fixed"),
        (200, b"8:abcdefgh"),
        (200, b"0:"),
    ]


async def test_a_response_without_content_length_is_chunked(
    server: Running, clock: trio.testing.MockClock
) -> None:
    received = await exchange(server.port, post("/chunks", b"123456789", CLOSE))
    assert b"\r\ntransfer-encoding: chunked\r\n" in received.lower()
    assert responses(received, "POST") == [(200, b"123456789")]


async def test_head_and_http_1_0(server: Running, clock: trio.testing.MockClock) -> None:
    received = await exchange(server.port, b"HEAD /echo HTTP/1.1\r\nHost: t\r\n" + CLOSE + b"\r\n")
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\n")  # the head only
    received = await exchange(server.port, b"GET /echo HTTP/1.0\r\n\r\n")  # closed after
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and received.endswith(b"\r\n\r\n0:")


async def test_100_continue_is_sent_when_the_app_reads(
    server: Running, clock: trio.testing.MockClock
) -> None:
    expect = b"Expect: 100-continue\r\n"
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(post("/echo", b"abcd", expect, CLOSE)[:-4])  # the head
            head = await stream.receive_some(65536)
            assert head.startswith(b"HTTP/1.1 100 Continue\r\n"), head
            assert head.endswith(b"\r\n\r\n")  # nothing else until the body comes
            await stream.send_all(b"abcd")
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
    assert responses(received, "POST") == [(200, b"4:abcd")]
    # Answered without reading: no 100, and the body is never asked for.
    received = await exchange(server.port, post("/refuse", b"", expect, CLOSE))
    assert b" 100 " not in received
    assert responses(received, "POST") == [(413, b"too large")]


async def test_a_refusal_before_the_body_closes_without_a_reset(
    server: Running, clock: trio.testing.MockClock
) -> None:
    """The app answers ``Connection: close`` without reading a 2 MiB body the
    client is still sending: the server reads and drops the rest before it
    closes, so the client gets the whole answer and an orderly end, not a
    reset that could destroy the answer unread."""
    body = b"z" * (2 * 1024 * 1024)
    received = b""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(post("/refuse", body))
            while chunk := await stream.receive_some(65536):  # a reset raises here
                received += chunk
    assert responses(received, "POST") == [(413, b"too large")]


async def test_an_app_that_does_not_read_holds_the_client_back(
    server: Running, clock: trio.testing.MockClock
) -> None:
    """Backpressure: while the app does not read, the server reads at most
    ``BODY_BUFFER`` ahead, so a large body stalls in the client's send (the
    kernel's buffers hold a few MiB); once the app reads, all of it arrives."""
    size = 64 * 1024 * 1024
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        await stream.send_all(
            b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size
        )
        sent = 0
        piece = b"y" * BODY_BUFFER
        with trio.move_on_after(3):
            while sent < size:
                await stream.send_all(piece)
                sent += len(piece)
        assert sent < size // 2  # stalled: the server stopped reading
        # From here time runs as on a wall clock: a pause of the machine while
        # the rest of the 64 MiB crosses loopback must not jump the mock clock
        # to the body's deadline (a loaded CI machine reset the connection).
        clock.autojump_threshold = math.inf
        clock.rate = 1.0
        server.app.release.set()
        while sent < size:
            await stream.send_all(piece)
            sent += len(piece)
        with trio.fail_after(5):
            received = b""
            while not received.endswith(b"y" * 64):
                received += await stream.receive_some(65536)
    assert responses(received, "POST") == [(200, b"%d:%s" % (size, b"y" * 64))]


@pytest.mark.parametrize("point", ["head", "body", "app"])
async def test_a_client_that_leaves_ends_its_request(
    server: Running, point: str, clock: trio.testing.MockClock
) -> None:
    """Whatever it left in the middle of, the app still waiting is cancelled
    and the server answers the next client."""
    data = post("/hold", b"0123456789")
    data = {"head": data[:20], "body": data[:-5], "app": data}[point]
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(data)
    await trio.sleep(0.5)
    await stream.aclose()
    await trio.sleep(0.5)
    assert server.app.cancelled == (0 if point == "head" else 1)
    assert responses(await exchange(server.port, get("/echo", CLOSE)), "GET") == [(200, b"0:")]


async def test_an_app_that_fails_gets_500(server: Running, clock: trio.testing.MockClock) -> None:
    received = await exchange(server.port, get("/fail"))
    assert responses(received, "GET") == [(500, b"")]
    assert b"\r\nconnection: close\r\n" in received.lower()


async def test_the_lifespan_runs_around_serving(
    nursery: trio.Nursery, clock: trio.testing.MockClock
) -> None:
    server = await start(nursery)
    assert server.app.lifespan == ["lifespan.startup"]
    assert responses(await exchange(server.port, get("/state", CLOSE)), "GET") == [(200, b"hello")]
    server.stop.set()
    await trio.testing.wait_all_tasks_blocked()
    assert server.app.lifespan == ["lifespan.startup", "lifespan.shutdown"]


async def test_a_failed_shutdown_is_logged_a_cancelled_one_is_not(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, clock: trio.testing.MockClock
) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "lifespan.startup.complete"})
        try:
            await receive()
        except trio.Cancelled:
            await send({"type": "lifespan.shutdown.failed", "message": "cancelled"})
            raise
        await send({"type": "lifespan.shutdown.failed", "message": "the pool would not close"})

    async with trio.open_nursery() as inner:
        await start(inner, app)
        inner.cancel_scope.cancel()
    assert not caplog.records
    server = await start(nursery, app)
    server.stop.set()
    await trio.testing.wait_all_tasks_blocked()
    assert [r.getMessage() for r in caplog.records] == [
        "the app's lifespan shutdown failed: the pool would not close"
    ]


async def test_an_app_without_lifespan_is_served(
    nursery: trio.Nursery, clock: trio.testing.MockClock
) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http", "no lifespan here"
        await answer(send, 200, b"plain")

    server = await start(nursery, app)
    assert responses(await exchange(server.port, get("/", CLOSE)), "GET") == [(200, b"plain")]
    server.stop.set()


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: t\r\nno colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32) + b"\r\n\r\n", 400),  # TLS
        (b"GET /\x00 HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 5000, 431),  # past max_head_bytes
    ],
)
async def test_bytes_h11_cannot_parse_get_its_status(
    server: Running, data: bytes, status: int, clock: trio.testing.MockClock
) -> None:
    received = await exchange(server.port, data)
    assert received.startswith(b"HTTP/1.1 %d " % status), received
    assert responses(await exchange(server.port, get("/echo", CLOSE)), "GET") == [(200, b"0:")]


@pytest.mark.parametrize(
    ("data", "status", "reason"),
    [
        (b"GET / HTTP/1.1\r\nHost: t\r\nno colon\r\n\r\n", 400, "Invalid header"),
        (b"GET / HTTP/1.1\r\n\r\n", 400, "exactly one Host"),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505, "not 1.0 or 1.1"),
        (b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 5000, 431, "exceeds 4096 bytes"),
    ],
)
async def test_a_refused_head_is_one_log_line(
    server: Running,
    caplog: pytest.LogCaptureFixture,
    data: bytes,
    status: int,
    reason: str,
    clock: trio.testing.MockClock,
) -> None:
    """No app saw the request: the server says what it refused and why."""
    caplog.set_level(logging.INFO, logger="agentik.server")
    received = await exchange(server.port, data)
    assert received.startswith(b"HTTP/1.1 %d " % status), received
    [line] = caplog.records
    assert line.levelno == logging.INFO
    assert line.getMessage().startswith(f"refused status={status} reason=")
    assert reason in line.getMessage()


CHUNKED_HEAD = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"zz\r\n", 400),
        (b"3\r\nabcX", 400),
        (b"0\r\nno colon\r\n\r\n", 400),
        (b"0\r\nX: " + b"a" * 20_000, 431),
    ],
)
async def test_a_malformed_body_cancels_the_app_and_gets_its_status(
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
    body: bytes,
    status: int,
    clock: trio.testing.MockClock,
) -> None:
    """The app waits for the body when it goes wrong: it is cancelled, never
    sees the refusal (no second response of its own, no traceback), and
    finds the status in its scope for its access log."""
    seen: list[dict[str, Any]] = []
    cancelled: list[bool] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        seen.append(scope)
        try:
            while (await receive())["type"] == "http.request":
                pass
            await answer(send, 500, b"the app saw the refusal")
        except trio.Cancelled:
            cancelled.append(True)
            raise

    caplog.set_level(logging.INFO, logger="agentik.server")
    server = await start(nursery, app)
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(CHUNKED_HEAD + b"1\r\nx\r\n")
            await trio.testing.wait_all_tasks_blocked()  # the app waits for more
            await stream.send_all(body)
            received = b""
            with contextlib.suppress(trio.BrokenResourceError):
                while chunk := await stream.receive_some(65536):
                    received += chunk
    await trio.testing.wait_all_tasks_blocked()
    assert responses(received, "POST") == [(status, b"")]
    assert cancelled == [True]
    assert seen[0][REFUSED] == status
    assert not caplog.records  # the app's access log says it; the server has nothing to add
    server.stop.set()


VALID = post("/echo", b"hello") + get("/echo", CLOSE)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    at=st.integers(0, len(VALID)),
    cut=st.integers(0, 8),
    noise=st.binary(max_size=12)
    | st.sampled_from([b"\r\n", b"\x00", b":", b" ", b"\n\n", b"\xff"]),
)
def test_odd_bytes_get_an_answer_and_the_server_stays_up(at: int, cut: int, noise: bytes) -> None:
    """Two pipelined requests with ``cut`` bytes at ``at`` replaced by
    ``noise``: whatever the server sends back parses as HTTP responses
    (typically 200s, or a 4xx h11 chose, then the close), nothing is a 5xx,
    and a well-formed request on a new connection is answered."""
    data = VALID[:at] + noise + VALID[at + cut :]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            server = await start(nursery)
            received = await exchange(server.port, data, limit=30)
            client = h11.Connection(h11.CLIENT)
            client.receive_data(received)
            client.receive_data(b"")
            statuses = []
            while True:
                client.send(h11.Request(method="POST", target="/", headers=[("Host", "t")]))
                client.send(h11.EndOfMessage())
                event = client.next_event()
                if isinstance(event, h11.ConnectionClosed):
                    break
                assert isinstance(event, h11.Response), (event, received)
                statuses.append(event.status_code)
                while not isinstance(client.next_event(), h11.EndOfMessage):
                    pass
                if client.their_state is not h11.DONE or not client.trailing_data[0]:
                    break  # closed after this response, or nothing more came
                client.start_next_cycle()
            assert all(status < 500 for status in statuses), received
            answer = await exchange(server.port, get("/echo", CLOSE))
            assert responses(answer, "GET") == [(200, b"0:")]
            server.stop.set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))


def test_date_and_server_are_built_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1_000_000.2
    monkeypatch.setattr("agentik.server.http._framing.time", SimpleNamespace(time=lambda: now))
    headers = ResponseHeaders()
    first = headers()
    assert first == b"date: %s\r\nserver: agentik\r\n" % formatdate(1_000_000, usegmt=True).encode()
    now = 1_000_000.9
    assert headers() is first  # the same second: not built again
    now = 1_000_001.0
    assert headers().startswith(b"date: %s\r\n" % formatdate(1_000_001, usegmt=True).encode())
