"""agentik's HTTP/1.1 server (``agentik.server.http._connection``, ``_serve``):
keep-alive expiry, requests never cut off by it, graceful shutdown, streaming
heads sent at once, a fixed-length response in one write, pipelining,
100-continue.

A real server on 127.0.0.1 with a small ASGI app, and a raw socket client that
parses with h11, so the test sees exactly what is on the wire and when the
server closes. Time is trio's mock clock: it jumps after 50 ms of real
idleness, so a keep-alive timeout of 5 s passes at once and a write still in
the kernel is not mistaken for idleness.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import pytest
import trio
import trio.testing

from agentik.server.http import HttpSettings
from agentik.server.http._connection import Connection
from agentik.server.http._serve import serve
from tests.asgi import answer_lifespan, read_body

KEEP_ALIVE = 5.0
WAIT = KEEP_ALIVE * 10
"""Longer than anything here should take (virtual seconds)."""


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


class App:
    """``/`` answers ``ok`` (Content-Length); ``/slow?S`` first sleeps S
    seconds; ``/stream`` sends a head and a first chunk (no Content-Length),
    then waits for ``release`` before the last chunk."""

    def __init__(self) -> None:
        self.release = trio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = await read_body(receive)
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"last"})
            return
        if scope["path"] == "/slow":
            await trio.sleep(float(scope["query_string"]))
        answer = b"ok:" + body
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


class Server:
    def __init__(self, port: int, app: App, stop: trio.Event) -> None:
        self.port = port
        self.app = app
        self.stop = stop


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[Server]:
    settings = HttpSettings(keep_alive_timeout=KEEP_ALIVE)
    app, stop = App(), trio.Event()
    binds = await nursery.start(
        lambda task_status: serve(
            app,
            settings=settings,
            graceful_timeout=GRACE,
            shutdown_trigger=stop.wait,
            task_status=task_status,
        )
    )
    yield Server(int(binds[0].rsplit(":", 1)[1]), app, stop)
    stop.set()


class Client:
    """One keep-alive connection, parsed with h11."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def send(self, *events: h11.Event) -> None:
        await self.stream.send_all(b"".join(self.h11.send(event) or b"" for event in events))

    async def next_event(self) -> h11.Event:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            with trio.fail_after(WAIT):
                self.h11.receive_data(await self.stream.receive_some(65536))

    async def response(self) -> tuple[int, bytes]:
        head = await self.next_event()
        while isinstance(head, h11.InformationalResponse):
            head = await self.next_event()
        assert isinstance(head, h11.Response), head
        body = b""
        while not isinstance(event := await self.next_event(), h11.EndOfMessage):
            assert isinstance(event, h11.Data), event
            body += event.data
        self.h11.start_next_cycle()
        return head.status_code, body

    async def get(self, target: str) -> tuple[int, bytes]:
        await self.send(request(target), h11.EndOfMessage())
        return await self.response()

    async def closed_by_server(self) -> bool:
        with trio.fail_after(WAIT):
            return await self.stream.receive_some(65536) == b""


def request(target: str, *headers: tuple[str, str]) -> h11.Request:
    return h11.Request(method="GET", target=target, headers=[("Host", "test"), *headers])


async def connect(server: Server) -> Client:
    return Client(await trio.open_tcp_stream("127.0.0.1", server.port))


async def closes_after_keep_alive(client: Client) -> None:
    """Idle from now on, the connection is closed by the server after one
    keep-alive timeout: not sooner, and not much later."""
    idle_since = trio.current_time()
    assert await client.closed_by_server()
    assert KEEP_ALIVE <= trio.current_time() - idle_since < KEEP_ALIVE + 1


async def test_an_idle_connection_closes_after_the_keep_alive_timeout(
    server: Server, clock: trio.testing.MockClock
) -> None:
    client = await connect(server)
    assert await client.get("/") == (200, b"ok:")
    await closes_after_keep_alive(client)


async def test_each_request_restarts_the_keep_alive_timeout(
    server: Server, clock: trio.testing.MockClock
) -> None:
    client = await connect(server)
    began = trio.current_time()
    for _ in range(4):  # 2.4 timeouts in all: the deadline must move each time
        assert await client.get("/") == (200, b"ok:")
        await trio.sleep(KEEP_ALIVE * 0.6)
    assert trio.current_time() - began > 2 * KEEP_ALIVE
    assert await client.get("/") == (200, b"ok:")
    await closes_after_keep_alive(client)


async def test_a_request_longer_than_the_timeout_is_not_cut_off(
    server: Server, clock: trio.testing.MockClock
) -> None:
    client = await connect(server)
    began = trio.current_time()
    assert await client.get(f"/slow?{KEEP_ALIVE * 3}") == (200, b"ok:")
    assert trio.current_time() - began >= KEEP_ALIVE * 3
    # The connection is still open; idle from now on, it gets the whole timeout.
    await closes_after_keep_alive(client)


async def test_shutdown_closes_idle_connections_and_finishes_busy_ones(
    server: Server, clock: trio.testing.MockClock
) -> None:
    idle, busy = await connect(server), await connect(server)
    assert await idle.get("/") == (200, b"ok:")
    await busy.send(request(f"/slow?{KEEP_ALIVE / 2}"), h11.EndOfMessage())
    await trio.sleep(0.1)  # the slow request is in the app
    began = trio.current_time()
    server.stop.set()
    assert await idle.closed_by_server()
    assert trio.current_time() - began < 1
    assert await busy.response() == (200, b"ok:")
    assert await busy.closed_by_server()


GRACE = 30
"""The fixture's ``graceful_timeout``."""


async def test_a_request_still_unanswered_when_the_drain_ends_gets_503(
    server: Server, clock: trio.testing.MockClock
) -> None:
    """Past the drain, an app that has not begun its answer is cancelled and
    its client told so (503 with ``Retry-After``), not left to find its
    connection dropped (a turn stuck on a frozen database at shutdown)."""
    client = await connect(server)
    await client.send(request(f"/slow?{GRACE * 10}"), h11.EndOfMessage())
    await trio.sleep(0.1)  # the request is in the app
    began = trio.current_time()
    server.stop.set()
    head = await client.next_event()
    assert GRACE <= trio.current_time() - began < GRACE + 1
    assert isinstance(head, h11.Response) and head.status_code == 503
    fields = dict(head.headers)
    assert fields[b"retry-after"] == b"1" and fields[b"connection"] == b"close"
    assert isinstance(await client.next_event(), h11.EndOfMessage)
    assert await client.closed_by_server()


async def test_an_answer_under_way_when_the_drain_ends_is_cut_by_the_close(
    server: Server, clock: trio.testing.MockClock
) -> None:
    """A response that began cannot become a 503: it ends unfinished, which
    the client tells by the close."""
    client = await connect(server)
    await client.send(request("/stream"), h11.EndOfMessage())
    head = await client.next_event()
    assert isinstance(head, h11.Response) and head.status_code == 200
    assert isinstance(await client.next_event(), h11.Data)
    server.stop.set()  # ``release`` never comes
    with pytest.raises(h11.RemoteProtocolError):  # closed mid-body, nothing more
        await client.next_event()


async def test_a_streaming_head_goes_out_before_the_body_is_done(
    server: Server, clock: trio.testing.MockClock
) -> None:
    client = await connect(server)
    await client.send(request("/stream"), h11.EndOfMessage())
    head = await client.next_event()
    assert isinstance(head, h11.Response) and head.status_code == 200
    first = await client.next_event()
    assert isinstance(first, h11.Data) and first.data == b"first"
    server.app.release.set()
    last = await client.next_event()
    assert isinstance(last, h11.Data) and last.data == b"last"
    assert isinstance(await client.next_event(), h11.EndOfMessage)


async def test_a_fixed_length_response_is_one_write(
    server: Server, monkeypatch: pytest.MonkeyPatch, clock: trio.testing.MockClock
) -> None:
    writes: list[bytes] = []
    send_all = Connection._send_all  # every write to the client goes through it

    async def counted(self: Connection, data: bytes, last: Any) -> None:
        writes.append(bytes(data))
        await send_all(self, data, last)

    client = await connect(server)
    monkeypatch.setattr(Connection, "_send_all", counted)
    await client.send(request("/"), h11.EndOfMessage())
    server_writes = len(writes)
    assert await client.response() == (200, b"ok:")
    (response,) = writes[server_writes:]
    assert response.startswith(b"HTTP/1.1 200") and response.endswith(b"\r\n\r\nok:")


async def test_pipelined_requests_are_answered_in_order(
    server: Server, clock: trio.testing.MockClock
) -> None:
    client = await connect(server)
    bodies = (b"one", b"two", b"three")
    posts = [
        h11.Request(
            method="POST", target="/", headers=[("Host", "test"), ("Content-Length", str(len(b)))]
        )
        for b in bodies
    ]
    wire = h11.Connection(h11.CLIENT)  # a second client state, only to write the bytes
    raw = b""
    for post, body in zip(posts, bodies, strict=True):
        raw += b"".join(
            wire.send(e) or b"" for e in (post, h11.Data(data=body), h11.EndOfMessage())
        )
        wire = h11.Connection(h11.CLIENT)
    await client.stream.send_all(raw)  # all three at once
    answers = []
    for post, body in zip(posts, bodies, strict=True):
        for event in (post, h11.Data(data=body), h11.EndOfMessage()):
            client.h11.send(event)  # already on the wire: only moves the parser along
        answers.append(await client.response())
    assert answers == [(200, b"ok:one"), (200, b"ok:two"), (200, b"ok:three")]


async def test_expect_100_continue(server: Server, clock: trio.testing.MockClock) -> None:
    client = await connect(server)
    post = h11.Request(
        method="POST",
        target="/",
        headers=[("Host", "test"), ("Content-Length", "4"), ("Expect", "100-continue")],
    )
    await client.send(post)
    informational = await client.next_event()
    assert isinstance(informational, h11.InformationalResponse)
    assert informational.status_code == 100
    await client.send(h11.Data(data=b"body"), h11.EndOfMessage())
    assert await client.response() == (200, b"ok:body")
