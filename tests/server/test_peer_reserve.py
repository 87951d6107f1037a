"""The reserve of connections for peers (agentik issue 33): past
``max_connections`` the engine still accepts ``PeerReserve.connections``
connections, serving on them only requests that carry the peer header (the
cluster's hop header); any other request there is answered ``503`` with
``Retry-After`` and the connection closed, without reaching the app. Past
the reserve too, connections wait in the listen backlog as before.

Without the reserve two forwarding nodes at their bound deadlock: each holds
all its connections waiting on requests it forwarded to the other, and those
wait, never accepted, in the other's backlog (tests/server/test_forward_cap.py
shows it with real nodes).

A real ``serve`` on 127.0.0.1 in the test's trio run, under trio's mock
clock (it jumps after 50 ms of real idleness), with a small app whose
``/hold`` requests are answered only when the test lets them go.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from agentik.server import ConfigError, Limits, load_config
from agentik.server.http import (
    ConnectionLimits,
    HttpSettings,
    PeerReserve,
    ReserveCounts,
    serve,
)

PEER = b"agentik-forwarded"


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


@attrs.define
class HoldingApp:
    """``/hold`` waits for ``release``; anything else is answered at once."""

    release: trio.Event = attrs.Factory(trio.Event)
    seen: list[str] = attrs.Factory(list)
    """The path of every request the app got."""
    holding: int = 0
    changed: trio.Event = attrs.Factory(trio.Event)

    def _count(self, step: int) -> None:
        self.holding += step
        self.changed.set()
        self.changed = trio.Event()

    async def until_holding(self, count: int) -> None:
        with trio.fail_after(5):
            while self.holding != count:
                await self.changed.wait()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.seen.append(scope["path"])
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/hold":
            self._count(1)
            try:
                await self.release.wait()
            finally:  # or cancelled: its client left
                self._count(-1)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"2"), (b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def serving(
    app: HoldingApp,
    *,
    max_connections: int = 2,
    reserve: int | None = 1,
    counts: ReserveCounts | None = None,
) -> AsyncIterator[int]:
    """A server of ``app`` on 127.0.0.1 (its port); ``counts`` gets what
    happened at the bound."""
    peers = None
    if reserve is not None:
        peers = PeerReserve(header=PEER, connections=reserve, counts=counts or ReserveCounts())
    settings = HttpSettings(limits=ConnectionLimits(max_connections=max_connections), peers=peers)
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(partial(serve, app, settings=settings))
        yield int(url.rsplit(":", 1)[1])
        app.release.set()
        nursery.cancel_scope.cancel()


class Client:
    """A raw HTTP/1.1 client on one connection."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.received = b""

    @classmethod
    async def connect(cls, port: int) -> Client:
        sock = trio.socket.socket()
        await sock.connect(("127.0.0.1", port))
        return cls(sock)

    async def send(self, path: str, *, peer: bool = False, body: bytes = b"") -> None:
        head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body)}\r\n"
        if peer:
            head += "agentik-forwarded: node-1\r\n"
        await self.sock.send((head + "\r\n").encode() + body)

    async def answer(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """The next response: status line, headers (lower-case names), body."""
        while b"\r\n\r\n" not in self.received:
            data = await self.sock.recv(65536)
            assert data, f"closed before an answer: {self.received!r}"
            self.received += data
        head, _, rest = self.received.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers[b"content-length"])
        while len(rest) < length:
            data = await self.sock.recv(65536)
            assert data
            rest += data
        self.received = rest[length:]
        return status, headers, rest[:length]

    async def closed_by_server(self) -> bool:
        """Whether the server closed the connection (EOF or a reset)."""
        try:
            data = await self.sock.recv(65536)
        except ConnectionResetError:
            return True
        self.received += data
        return not data

    async def unanswered_for(self, seconds: float) -> bool:
        with trio.move_on_after(seconds) as waited:
            self.received += await self.sock.recv(1)
        return waited.cancelled_caught

    def close(self) -> None:
        self.sock.close()


async def held(port: int, app: HoldingApp, count: int) -> list[Client]:
    """``count`` plain connections, each with a ``/hold`` request in the app."""
    clients = []
    for _ in range(count):
        client = await Client.connect(port)
        await client.send("/hold")
        clients.append(client)
    await app.until_holding(count)
    return clients


async def test_a_peer_request_is_served_past_the_bound(clock: trio.testing.MockClock) -> None:
    app = HoldingApp()
    async with serving(app) as port:
        busy = await held(port, app, 2)
        peer = await Client.connect(port)
        await peer.send("/now", peer=True)
        with trio.fail_after(5):
            status, headers, body = await peer.answer()
        assert (status, body) == (b"HTTP/1.1 200 OK", b"ok")
        # one request a connection in the reserve: it is free again at once
        assert headers[b"connection"] == b"close"
        with trio.fail_after(5):
            assert await peer.closed_by_server()
        peer.close()
        again = await Client.connect(port)
        await again.send("/now", peer=True)
        with trio.fail_after(5):
            assert (await again.answer())[0] == b"HTTP/1.1 200 OK"
        again.close()
        for client in busy:
            client.close()


async def test_a_plain_request_past_the_bound_gets_503_without_the_app(
    clock: trio.testing.MockClock,
) -> None:
    app = HoldingApp()
    async with serving(app) as port:
        busy = await held(port, app, 2)
        plain = await Client.connect(port)
        await plain.send("/now", body=b'{"text": "hi"}')
        with trio.fail_after(5):
            status, headers, body = await plain.answer()
        assert status == b"HTTP/1.1 503 Service Unavailable"
        assert headers[b"retry-after"] == b"1"
        assert headers[b"connection"] == b"close"
        assert headers[b"content-type"] == b"application/json"
        assert json.loads(body)["error"]["code"] == "at_capacity"
        with trio.fail_after(5):
            assert await plain.closed_by_server()
        plain.close()
        assert app.seen == ["/hold", "/hold"]  # the app never saw it
        # a regular connection closes: the next plain client is served as usual
        busy[0].close()
        await app.until_holding(1)
        await trio.sleep(1)  # the mock clock jumps once the server is idle: the slot is back
        fresh = await Client.connect(port)
        await fresh.send("/now")
        with trio.fail_after(5):
            status, headers, _ = await fresh.answer()
        assert status == b"HTTP/1.1 200 OK"
        assert b"connection" not in headers  # kept alive: a regular connection
        await fresh.send("/now")
        with trio.fail_after(5):
            assert (await fresh.answer())[0] == b"HTTP/1.1 200 OK"
        fresh.close()
        busy[1].close()


async def test_a_peer_connection_on_a_regular_slot_moves_to_the_reserve(
    clock: trio.testing.MockClock,
) -> None:
    """A peer's kept-alive connection, opened while slots were free, holds a
    regular one. Once clients take every other regular slot, its next request
    moves it to the reserve (answered, then closed), so the next client gets
    the regular slot it held instead of a 503."""
    app = HoldingApp()
    counts = ReserveCounts()
    async with serving(app, counts=counts) as port:
        peer = await Client.connect(port)
        await peer.send("/now", peer=True)
        with trio.fail_after(5):
            _, headers, _ = await peer.answer()
        assert b"connection" not in headers  # a regular slot: kept alive
        assert counts == ReserveCounts()
        busy = await held(port, app, 1)  # every regular slot taken now
        await peer.send("/now", peer=True)
        with trio.fail_after(5):
            status, headers, _ = await peer.answer()
        assert status == b"HTTP/1.1 200 OK"
        assert headers[b"connection"] == b"close"  # a reserve connection: one request
        with trio.fail_after(5):
            assert await peer.closed_by_server()
        peer.close()
        client = await Client.connect(port)
        await client.send("/now")
        with trio.fail_after(5):
            status, headers, _ = await client.answer()
        assert status == b"HTTP/1.1 200 OK"  # the regular slot the peer held
        assert b"connection" not in headers
        client.close()
        assert counts == ReserveCounts(moved=1)
        for other in busy:
            other.close()


async def test_a_peer_connection_keeps_its_regular_slot_while_others_are_free(
    clock: trio.testing.MockClock,
) -> None:
    """With a regular slot still free nothing moves: the peer's connection is
    kept alive (a hop costs no new connection while the node has room)."""
    app = HoldingApp()
    async with serving(app, max_connections=3) as port:
        peer = await Client.connect(port)
        busy = await held(port, app, 1)
        for _ in range(3):
            await peer.send("/now", peer=True)
            with trio.fail_after(5):
                status, headers, _ = await peer.answer()
            assert status == b"HTTP/1.1 200 OK"
            assert b"connection" not in headers
        peer.close()
        for other in busy:
            other.close()


async def test_a_client_in_the_reserve_waits_for_a_regular_slot_while_half_is_free(
    clock: trio.testing.MockClock,
) -> None:
    """A client past the bound waits, as it would have in the listen backlog,
    for a regular slot (then served on a kept-alive connection), while no
    more than half the reserve waits so; past that it gets the 503, and a
    peer still finds room."""
    app = HoldingApp()
    counts = ReserveCounts()
    async with serving(app, reserve=2, counts=counts) as port:
        busy = await held(port, app, 2)
        waiting = await Client.connect(port)
        await waiting.send("/now")
        assert await waiting.unanswered_for(3)
        peer = await Client.connect(port)
        await peer.send("/now", peer=True)
        with trio.fail_after(5):
            assert (await peer.answer())[0] == b"HTTP/1.1 200 OK"
            assert await peer.closed_by_server()
        peer.close()
        await trio.sleep(1)  # the peer's reserve slot is back
        turned = await Client.connect(port)
        await turned.send("/now")
        with trio.fail_after(5):
            status, headers, _ = await turned.answer()
        assert status == b"HTTP/1.1 503 Service Unavailable"  # half the reserve waits
        assert headers[b"retry-after"] == b"1"
        turned.close()
        assert app.seen == ["/hold", "/hold", "/now"]
        busy[0].close()  # its regular slot goes to the waiting client
        with trio.fail_after(5):
            status, headers, _ = await waiting.answer()
        assert status == b"HTTP/1.1 200 OK"
        assert b"connection" not in headers  # a regular connection, kept alive
        await waiting.send("/now")
        with trio.fail_after(5):
            assert (await waiting.answer())[0] == b"HTTP/1.1 200 OK"
        waiting.close()
        busy[1].close()
        assert counts == ReserveCounts(turned_away=1, waited=1)


async def test_a_client_waiting_in_the_reserve_is_not_timed_out(
    clock: trio.testing.MockClock,
) -> None:
    """A head that came in two reads started the header timeout (10 s); its
    wait for a regular slot is not the client's slowness, so a wait longer
    than that still ends in an answer."""
    app = HoldingApp()
    async with serving(app, reserve=2) as port:
        busy = await held(port, app, 2)
        waiting = await Client.connect(port)
        await waiting.sock.send(b"POST /now HTTP/1.1\r\nHost: test\r\n")
        await trio.sleep(1)
        await waiting.sock.send(b"Content-Length: 0\r\n\r\n")
        assert await waiting.unanswered_for(30)
        busy[0].close()
        with trio.fail_after(5):
            status, _, _ = await waiting.answer()
        assert status == b"HTTP/1.1 200 OK"
        waiting.close()
        busy[1].close()


async def test_past_the_reserve_connections_wait_in_the_backlog(
    clock: trio.testing.MockClock,
) -> None:
    """The reserve is taken while its connection is open and given back when
    it closes; past it a peer's connection waits, unanswered, as before."""
    app = HoldingApp()
    async with serving(app) as port:
        busy = await held(port, app, 2)
        first = await Client.connect(port)
        await first.send("/hold", peer=True)
        await app.until_holding(3)
        waiting = await Client.connect(port)  # the kernel completes the handshake
        await waiting.send("/now", peer=True)
        assert await waiting.unanswered_for(3)
        assert app.seen == ["/hold"] * 3
        first.close()  # its request is cancelled, its reserve given back
        with trio.fail_after(5):
            status, _, _ = await waiting.answer()
        assert status == b"HTTP/1.1 200 OK"
        waiting.close()
        for client in busy:
            client.close()


async def test_without_a_reserve_past_the_bound_waits(clock: trio.testing.MockClock) -> None:
    app = HoldingApp()
    async with serving(app, reserve=None) as port:
        busy = await held(port, app, 2)
        peer = await Client.connect(port)
        await peer.send("/now", peer=True)
        assert await peer.unanswered_for(3)
        busy[0].close()
        with trio.fail_after(5):
            assert (await peer.answer())[0] == b"HTTP/1.1 200 OK"
        peer.close()
        busy[1].close()


def test_the_reserve_is_a_limits_setting(tmp_path: Path) -> None:
    """``[limits] peer_connections`` (``AGENTIK_PEER_CONNECTIONS``): by default
    a quarter of ``max_connections``, at least 16; 0 turns the reserve off."""
    assert Limits().peer_connections == 250
    assert Limits(max_connections=40).peer_connections == 16
    assert Limits(max_connections=4000).peer_connections == 1000
    path = tmp_path / "agentik.toml"
    path.write_text("[limits]\nmax_connections = 200\n")
    assert load_config(path, env={}).limits.peer_connections == 50
    path.write_text("[limits]\npeer_connections = 0\n")
    assert load_config(path, env={}).limits.peer_connections == 0
    env = {"AGENTIK_PEER_CONNECTIONS": "7"}
    assert load_config(path, env=env).limits.peer_connections == 7
    path.write_text("[limits]\npeer_connections = -1\n")
    with pytest.raises(ConfigError, match=r"peer_connections must be an integer >= 0, got -1$"):
        load_config(path, env={})
