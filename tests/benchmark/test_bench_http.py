"""The bench's own HTTP client against real servers on 127.0.0.1: keep-alive
reuse, chunked and Content-Length bodies, 307 redirects, a connection the
server closed while idle, and the CPU per turn it reports."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from agentik.benchmark import BenchConfig, format_table, run_bench
from agentik.benchmark._http import BenchClient
from tests.asgi import answer_lifespan, read_body, serve_on_loopback
from tests.server.conftest import start_server


async def app(ports: list[int], scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/redirect`` answers 307 to ``/echo``; ``/echo`` answers the body, chunked."""
    if scope["type"] == "lifespan":
        await answer_lifespan(receive, send)
        return
    body = await read_body(receive)
    ports.append(scope["client"][1])
    if scope["path"] == "/redirect":
        headers = [(b"location", b"/echo"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 307, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for piece in (b"echo:", body):  # no Content-Length: hypercorn sends it chunked
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def test_keep_alive_chunked_and_redirects(nursery: trio.Nursery) -> None:
    """Three requests, one redirected, all on one kept-alive connection."""
    ports: list[int] = []
    url = await serve_on_loopback(nursery, partial(app, ports))
    client = BenchClient(url, {"authorization": "Bearer x"})
    first = await client.post("/echo", b'{"a":1}')
    second = await client.post("/redirect", b'{"b":2}')
    await client.aclose()
    assert (first.status, first.body) == (200, b'echo:{"a":1}')
    assert (second.status, second.body) == (200, b'echo:{"b":2}')
    assert len(ports) == 3
    assert len(set(ports)) == 1


async def test_a_connection_closed_while_idle_is_replaced(nursery: trio.Nursery) -> None:
    """A server that closes after each answer (without saying so): the next
    request finds the connection closed unanswered and goes on a new one."""
    served: list[bytes] = []

    async def once(stream: trio.SocketStream) -> None:
        async with stream:
            data = await stream.receive_some(65536)
            served.append(data)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    listeners = await nursery.start(partial(trio.serve_tcp, once, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    client = BenchClient(f"http://127.0.0.1:{port}", {})
    replies = [await client.post("/x", b"{}") for _ in range(3)]
    await client.aclose()
    assert [(r.status, r.body) for r in replies] == [(200, b"ok")] * 3
    assert len(served) == 3


async def test_a_fresh_connection_closed_unanswered_is_an_error(nursery: trio.Nursery) -> None:
    """Closed before answering on a new connection: no resend, a clear error."""

    async def hang_up(stream: trio.SocketStream) -> None:
        await stream.aclose()

    listeners = await nursery.start(partial(trio.serve_tcp, hang_up, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    client = BenchClient(f"http://127.0.0.1:{port}", {})
    with pytest.raises(ConnectionError, match="closed the connection"):
        await client.post("/x", b"{}")


async def test_the_bench_reports_its_own_cpu_per_turn(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Against a server the result and the table carry the client's CPU per turn."""
    async for running in start_server(nursery, tmp_path):
        result = await run_bench(BenchConfig(conversations=4, turns=2, url=running.url))
        assert result.turns_ok == 8
        assert result.client_cpu_ms_per_turn is not None
        assert result.client_cpu_ms_per_turn > 0
        assert "bench client CPU per turn" in format_table(result)
