"""A slow client cannot hold the server (issue 14, defect 6): a request head and
body must arrive within ``[limits] header_timeout`` and ``body_timeout`` (the
latter extended by one second per ``body_min_rate`` bytes, as Apache's
mod_reqtimeout does), open connections are bounded by ``max_connections``,
and ``Expect: 100-continue`` with a Content-Length past ``max_body_bytes`` is
refused with 413 before any ``100 Continue``.

``serve_agentik`` on 127.0.0.1 in the test's trio run (``tests.server.rawconn``)
under trio's mock clock, which jumps after 50 ms of real idleness: a client
trickling one byte per (virtual) second runs for minutes of server time in
a second or two.
"""

from __future__ import annotations

import json
import re
import resource
import tomllib
from pathlib import Path

import attrs
import h11
import pytest
import trio
import trio.testing

from agentik.server import ConfigError, Limits, load_config
from agentik.server.http._serve import warn_if_descriptors_short
from agentik.server.http._timer import ConnectionLimits
from tests.server.rawconn import (
    RawClient,
    Server,
    back_to_baseline,
    health,
    request_bytes,
    running_server,
)

LIMITS = Limits()


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


async def trickle(client: RawClient, data: bytes, rate: float) -> None:
    """Send ``data`` at ``rate`` bytes per second, in 1-second pieces, until
    the server cuts the connection off (a reset is the same as a close here)."""
    step = max(1, int(rate))
    for start in range(0, len(data), step):
        try:
            await client.send(data[start : start + step])
        except OSError:
            return
        await trio.sleep(step / rate)


async def cut_off_with_408(client: RawClient) -> float:
    """Read to the end: a 408 (``Connection: close``) then EOF; the time it came."""
    with trio.fail_after(600):
        response = await client.read_event()
    assert isinstance(response, h11.Response), response
    assert response.status_code == 408
    assert (b"connection", b"close") in response.headers
    at = trio.current_time()
    assert await client.closed_by_server()
    return at


async def test_a_trickling_head_is_cut_off_at_the_header_timeout(
    clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        head, _ = request_bytes("native-json", "c1")
        client = await RawClient.connect(server.port)
        began = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle, client, head, 1.0)  # the head takes ~150 s
            cut = await cut_off_with_408(client) - began
            nursery.cancel_scope.cancel()
        assert LIMITS.header_timeout <= cut < LIMITS.header_timeout + 1
        client.sock.close()
        await back_to_baseline(server)


async def body_cut_off_after(server: Server, size: int, rate: float) -> float | None:
    """Send a turn whose body is ``size`` bytes at ``rate`` bytes per second;
    seconds after the head until the server cut it off with 408, or None if
    it answered the turn (200)."""
    server.model.release.set()
    head = (
        "POST /agentik/conversations/c1/turns HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    ).encode()
    body = json.dumps({"text": "x" * (size - 12)}).encode()
    assert len(body) == size
    client = await RawClient.connect(server.port)
    async with trio.open_nursery() as nursery:
        await client.send(head)
        began = trio.current_time()
        nursery.start_soon(trickle, client, body, rate)
        with trio.fail_after(3600):
            response = await client.read_event()
        assert isinstance(response, h11.Response), response
        at = trio.current_time() - began
        nursery.cancel_scope.cancel()
    client.sock.close()
    if response.status_code == 200:
        return None
    assert response.status_code == 408
    return at


async def test_a_trickling_body_is_cut_off_at_the_body_timeout(
    clock: trio.testing.MockClock,
) -> None:
    """The issue's client: Content-Length 100, one byte a second."""
    async with running_server() as server:
        cut = await body_cut_off_after(server, 100, 1.0)
        assert cut is not None
        assert LIMITS.body_timeout <= cut < LIMITS.body_timeout + 1
        assert await server.stored("c1") == []  # the turn never started
        await back_to_baseline(server)


async def test_a_large_body_at_the_minimum_rate_gets_the_time_it_needs(
    clock: trio.testing.MockClock,
) -> None:
    """30,000 bytes at 1,000 B/s take 30 s, past ``body_timeout`` but within
    its extension (20 s + 30,000 / 500 s); at 200 B/s they would take 150 s
    and are cut off once 20 s + received / 500 has passed (about 33 s)."""
    async with running_server() as server:
        assert await body_cut_off_after(server, 30_000, 1000.0) is None
    async with running_server() as server:
        cut = await body_cut_off_after(server, 30_000, 200.0)
        assert cut is not None
        assert 33 <= cut < 35


async def test_150_trickling_clients_do_not_stop_a_turn(clock: trio.testing.MockClock) -> None:
    """The issue's 150 clients, each with a body trickling in: a well-behaved
    client's turn is answered at once meanwhile, and all 150 are cut off at
    the body deadline, freeing everything."""
    head = (
        b"POST /agentik/conversations/slow/turns HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    async with running_server() as server:
        slow = [await RawClient.connect(server.port) for _ in range(150)]
        async with trio.open_nursery() as nursery:
            sent = trio.current_time()
            for client in slow:
                await client.send(head)
                nursery.start_soon(trickle, client, b" " * 100, 1.0)
            await trio.sleep(5)
            server.model.release.set()
            began = trio.current_time()
            client = await RawClient.connect(server.port)
            head_bytes, body = request_bytes("native-json", "c1")
            await client.send(head_bytes + body)
            client.request_sent(head_bytes, body)
            response = await client.read_event()
            assert isinstance(response, h11.Response) and response.status_code == 200
            assert trio.current_time() - began < 1
            client.sock.close()
            cuts = [await cut_off_with_408(c) - sent for c in slow]
            nursery.cancel_scope.cancel()
        assert all(LIMITS.body_timeout <= cut < LIMITS.body_timeout + 1 for cut in cuts), cuts
        for client in slow:
            client.sock.close()
        await back_to_baseline(server)
        assert await server.stored("slow") == []


async def test_connections_past_the_bound_wait_until_one_closes(
    clock: trio.testing.MockClock,
) -> None:
    """``max_connections = 3``: a fourth client is not accepted (its request
    waits in the listen backlog) while an established connection goes on
    being served; it is answered as soon as one closes."""
    async with running_server(Limits(max_connections=3)) as server:
        established = await RawClient.connect(server.port)
        assert await get_health(established) == 200
        slow = [await RawClient.connect(server.port) for _ in range(2)]
        for client in slow:
            await client.send(b"GET /health HTTP/1.1\r\n")  # never finished
        waiting = await RawClient.connect(server.port)  # the kernel accepts it
        await waiting.send(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        with trio.move_on_after(3) as unanswered:
            await waiting.sock.recv(1)
        assert unanswered.cancelled_caught
        assert await get_health(established) == 200  # undisturbed
        established.sock.close()
        with trio.fail_after(1):
            assert await waiting.sock.recv(12) == b"HTTP/1.1 200"
        waiting.sock.close()
        for client in slow:  # cut off at the header timeout; the server answers on
            assert (await cut_off_with_408(client)) > 0
            client.sock.close()
        assert await health(server.port) == 200
        await back_to_baseline(server)


async def get_health(client: RawClient) -> int:
    """GET /health on an open keep-alive connection."""
    await client.send(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
    client.h11.send(h11.Request(method="GET", target="/health", headers=[("Host", "test")]))
    client.h11.send(h11.EndOfMessage())
    response = await client.read_event()
    assert isinstance(response, h11.Response), response
    while not isinstance(await client.read_event(), h11.EndOfMessage):
        pass
    client.h11.start_next_cycle()
    return response.status_code


@pytest.mark.parametrize("declared", [LIMITS.max_body_bytes + 1, 10**12])
async def test_expect_100_continue_past_the_limit_gets_413_and_no_100(
    declared: int, clock: trio.testing.MockClock
) -> None:
    async with running_server() as server:
        client = await RawClient.connect(server.port)
        await client.send(
            b"POST /agentik/conversations/c1/turns HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % declared
        )
        with trio.fail_after(5):
            assert await client.closed_by_server()
        assert client.received.startswith(b"HTTP/1.1 413 ")
        assert b"100 Continue" not in client.received
        client.sock.close()
        assert await server.stored("c1") == []
        await back_to_baseline(server)


async def test_expect_100_continue_within_the_limit_gets_100_then_the_answer(
    clock: trio.testing.MockClock,
) -> None:
    async with running_server() as server:
        server.model.release.set()
        head, body = request_bytes("native-json", "c1")
        head = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
        client = await RawClient.connect(server.port)
        await client.send(head)
        with trio.fail_after(5):
            while b"\r\n\r\n" not in client.received:
                client.received += await client.sock.recv(65536)
        assert client.received.startswith(b"HTTP/1.1 100 ")
        await client.send(body)
        with trio.fail_after(5):
            while b'"text":"done"' not in client.received:
                client.received += await client.sock.recv(65536)
        assert b"HTTP/1.1 200 " in client.received
        client.sock.close()


async def test_the_deadlines_come_from_the_limits_settings(clock: trio.testing.MockClock) -> None:
    async with running_server(Limits(header_timeout=2.5)) as server:
        client = await RawClient.connect(server.port)
        await client.send(b"GET /health HTTP/1.1\r\n")
        began = trio.current_time()
        assert 2.5 <= await cut_off_with_408(client) - began < 3
        client.sock.close()


def test_the_limits_are_read_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(
        "[limits]\nheader_timeout = 5\nbody_timeout = 7.5\n"
        "body_min_rate = 100\nmax_connections = 9\n"
    )
    limits = load_config(path, env={}).limits
    assert (limits.header_timeout, limits.body_timeout, limits.body_min_rate) == (5, 7.5, 100)
    assert limits.max_connections == 9
    env = {"AGENTIK_MAX_CONNECTIONS": "12", "AGENTIK_HEADER_TIMEOUT": "1.5"}
    limits = load_config(path, env=env).limits
    assert (limits.max_connections, limits.header_timeout) == (12, 1.5)
    with pytest.raises(ConfigError, match=r"^AGENTIK_BODY_MIN_RATE: \[limits\] body_min_rate must"):
        load_config(path, env={"AGENTIK_BODY_MIN_RATE": "0"})
    path.write_text("[limits]\nmax_connections = 0\n")
    with pytest.raises(ConfigError, match=r"max_connections must be a positive integer, got 0$"):
        load_config(path, env={})


def test_the_defaults_agree_with_the_docs() -> None:
    """The connection handler's defaults are the ``[limits]`` defaults, and
    docs/server.md shows them."""
    for field in attrs.fields(ConnectionLimits):
        assert getattr(ConnectionLimits(), field.name) == getattr(Limits(), field.name)
    text = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text("utf-8")
    block = re.search(r"```toml\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None
    documented = tomllib.loads(block.group(1))["limits"]
    assert documented == {
        field.name: getattr(Limits(), field.name) for field in attrs.fields(Limits)
    }


def test_an_open_file_limit_below_the_bound_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (90, 4096))
    warn_if_descriptors_short(1000)
    warn_if_descriptors_short(1000, 250)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1100, 4096))
    warn_if_descriptors_short(1000)
    warn_if_descriptors_short(1000, 250)  # the peers' reserve counts too
    monkeypatch.setattr(resource, "getrlimit", lambda _: (2000, 4096))
    warn_if_descriptors_short(1000, 250)
    assert [r.getMessage() for r in caplog.records] == [
        "the open-file limit (90) is below [limits] max_connections + 64 (1064):"
        " raise it (ulimit -n) or lower max_connections",
        "the open-file limit (90) is below [limits] max_connections + peer_connections"
        " + 64 (1314): raise it (ulimit -n) or lower max_connections",
        "the open-file limit (1100) is below [limits] max_connections + peer_connections"
        " + 64 (1314): raise it (ulimit -n) or lower max_connections",
    ]
