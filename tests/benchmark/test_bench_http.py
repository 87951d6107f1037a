"""The bench's own HTTP client against real servers on 127.0.0.1: keep-alive
reuse, chunked and Content-Length bodies, 307 redirects, a connection the
server closed while idle, and the CPU per turn it reports.

``agentik bench --url`` against ``agentik serve`` (turns, prefix, CPU), and
against scripted servers that read every request with h11 (the oracle of the
request framing) and answer ``Connection: close``, close idle connections,
refuse with 429 or cut an answer short."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import h11
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from agentik.benchmark import BenchConfig, format_table, run_bench
from agentik.benchmark._http import BenchClient, post_request
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
    """Against ``agentik serve``: every turn counted, none failed, the
    conversations stored under the prefix asked for, and the result and the
    table carry the client's CPU per turn and the cores it kept busy."""
    async for running in start_server(nursery, tmp_path):
        config = BenchConfig(conversations=4, turns=2, url=running.url, prefix="node-a.1")
        result = await run_bench(config)
        assert (result.turns_ok, result.turns_failed, result.turns_overloaded) == (8, 0, 0)
        assert result.client_cpu_ms_per_turn is not None
        assert result.client_cpu_ms_per_turn > 0
        assert result.client_cpu_cores is not None
        assert result.client_cpu_cores > 0
        table = format_table(result)
        assert re.search(r"\nbench client CPU per turn +[0-9.]+ ms, [0-9.]+ cores\n", table)
        assert re.search(r"\nconversation ids +node-a\.1-0 \.\. node-a\.1-3\n", table)
        listed = await running.client.get("/agentik/conversations", params={"limit": 100})
        assert sorted(listed.json()["conversations"]) == [f"node-a.1-{i}" for i in range(4)]
        # A second client on the same server, default prefix: its own conversations.
        other = await run_bench(BenchConfig(conversations=4, turns=1, url=running.url))
        assert re.fullmatch(r"bench-[0-9a-f]{6}", other.prefix)
        listed = await running.client.get("/agentik/conversations", params={"limit": 100})
        assert len(listed.json()["conversations"]) == 8
        for i in range(4):
            history = await running.client.get(f"/agentik/conversations/node-a.1-{i}/messages")
            assert [m["content"] for m in history.json()["messages"] if m["role"] == "user"] == [
                f"turn {t} of conversation {i}" for t in range(2)
            ]


@given(
    host=st.from_regex(r"[a-z0-9.-]{1,30}(:[0-9]{1,5})?", fullmatch=True),
    target=st.from_regex(r"/[A-Za-z0-9._~/%-]{0,80}(\?[A-Za-z0-9=&]{0,20})?", fullmatch=True),
    headers=st.dictionaries(
        st.from_regex(r"x-[a-z0-9-]{1,20}", fullmatch=True),
        st.from_regex(r"[!-~]([ -~]{0,40}[!-~])?", fullmatch=True),
        max_size=4,
    ),
    body=st.binary(max_size=2000),
)
def test_post_request_is_what_h11_reads(
    host: str, target: str, headers: dict[str, str], body: bytes
) -> None:
    """The request framing written here, read by h11 (the oracle): one POST
    with the host, target, headers and body given, and nothing after it."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    server = h11.Connection(h11.SERVER)
    server.receive_data(post_request(host, target, lines, body))
    request = server.next_event()
    assert isinstance(request, h11.Request)
    assert (request.method, request.target, request.http_version) == (
        b"POST",
        target.encode(),
        b"1.1",
    )
    got = [(name.decode(), value.decode()) for name, value in request.headers]
    assert got == [
        ("host", host),
        *headers.items(),
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
    ]
    received = b""
    while isinstance(event := server.next_event(), h11.Data):
        received += event.data
    assert received == body
    assert isinstance(event, h11.EndOfMessage)
    assert server.next_event() is h11.NEED_DATA


@attrs.define
class Wire:
    """What a scripted server saw: each turn request (target, body) in order,
    and how many connections carried one."""

    turns: list[tuple[bytes, bytes]] = attrs.Factory(list)
    turn_connections: int = 0


async def scripted_server(nursery: trio.Nursery, plan: Callable[[int], str]) -> tuple[str, Wire]:
    """An HTTP/1.1 server that reads every request with h11 (so a malformed
    one fails the test) and answers the probe 200, and turn number ``n`` as
    ``plan(n)`` says: ``ok``; ``close`` (``Connection: close``, and waits for
    the client to close);
    ``idle-close`` (answers as keep-alive, then closes without saying so, as
    an idle timeout does); ``429`` (with ``Retry-After``); ``cut`` (a head
    and part of the body, then closes)."""
    wire = Wire()

    async def send(stream: trio.SocketStream, conn: h11.Connection, *events: h11.Event) -> None:
        await stream.send_all(b"".join(conn.send(event) or b"" for event in events))

    async def handle(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        counted = False
        async with stream:
            while True:
                request, body = None, b""
                while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                    if event is h11.NEED_DATA:
                        conn.receive_data(await stream.receive_some(65536))
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                assert request is not None
                if request.method == b"GET":  # the probe
                    answer = b'{"conversations":[],"next_after":null}'
                    length = ("content-length", str(len(answer)))
                    await send(stream, conn, h11.Response(status_code=200, headers=[length]))
                    await send(stream, conn, h11.Data(data=answer), h11.EndOfMessage())
                    conn.start_next_cycle()
                    continue
                step = plan(len(wire.turns))
                wire.turns.append((request.target, body))
                wire.turn_connections += not counted
                counted = True
                status = 429 if step == "429" else 200
                answer = b'{"text":"ok"}'
                headers = [("content-length", str(len(answer)))]
                if step == "close":
                    headers.append(("connection", "close"))
                if step == "429":
                    headers.append(("retry-after", "1"))
                await send(stream, conn, h11.Response(status_code=status, headers=headers))
                if step == "cut":
                    await send(stream, conn, h11.Data(data=answer[:3]))
                    return
                await send(stream, conn, h11.Data(data=answer), h11.EndOfMessage())
                if step == "close":
                    # Said, but left open: a client that sent again here would hang.
                    await trio.sleep_forever()
                if step == "idle-close":
                    return
                conn.start_next_cycle()

    listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}", wire


async def test_connection_close_on_every_answer(nursery: trio.Nursery) -> None:
    """Each answer says ``Connection: close`` (and the server leaves the
    closing to the client): each turn goes on a new connection, none fails,
    none is sent twice."""
    url, wire = await scripted_server(nursery, lambda n: "close")
    with trio.fail_after(30):
        result = await run_bench(BenchConfig(conversations=3, turns=4, url=url, prefix="c"))
    assert (result.turns_ok, result.turns_failed, result.turns_overloaded) == (12, 0, 0)
    assert len(wire.turns) == wire.turn_connections == 12
    assert sorted(target for target, _ in wire.turns) == sorted(
        f"/agentik/conversations/c-{i}/turns".encode() for i in range(3) for _ in range(4)
    )


async def test_idle_connections_closed_by_the_server(nursery: trio.Nursery) -> None:
    """The server closes each connection after answering, without saying so
    (an idle timeout shorter than the client's pause): the next turn finds it
    closed and goes on a new one; none fails, none is sent twice."""
    url, wire = await scripted_server(nursery, lambda n: "idle-close")
    result = await run_bench(BenchConfig(conversations=3, turns=4, url=url, prefix="c"))
    assert (result.turns_ok, result.turns_failed, result.turns_overloaded) == (12, 0, 0)
    assert len(wire.turns) == wire.turn_connections == 12


async def test_a_429_is_overloaded_not_failed(nursery: trio.Nursery) -> None:
    """Every other turn refused with 429 and Retry-After: counted as
    overloaded, the connection kept, the run a success."""
    url, wire = await scripted_server(nursery, lambda n: "429" if n % 2 else "ok")
    result = await run_bench(BenchConfig(conversations=2, turns=5, url=url))
    assert (result.turns_ok, result.turns_failed, result.turns_overloaded) == (5, 0, 5)
    assert len(wire.turns) == 10
    assert wire.turn_connections == 2
    assert "turns ok / failed / overloaded   5 / 0 / 5" in format_table(result)


async def test_a_connection_cut_mid_answer_is_a_failed_turn_not_resent(
    nursery: trio.Nursery,
) -> None:
    """Part of an answer then a close: the turn may have run, so it is failed,
    not sent again; the conversation goes on on a new connection."""
    url, wire = await scripted_server(nursery, lambda n: "cut" if n == 1 else "ok")
    result = await run_bench(BenchConfig(conversations=1, turns=4, url=url, prefix="c"))
    assert (result.turns_ok, result.turns_failed, result.turns_overloaded) == (3, 1, 0)
    assert [body for _, body in wire.turns] == [
        b'{"text": "turn %d of conversation 0"}' % t for t in range(4)
    ]
    assert wire.turn_connections == 2
