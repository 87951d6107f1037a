"""A client that goes away at any point frees its connection and its tasks at
once, and the turn it started still finishes and commits (issue 14, defect 1).

The matrix: every transport that runs a turn (native SSE, AG-UI, A2A
SendStreamingMessage, and the native JSON route, which streams nothing) x
every point a client can leave at (half-way through the request head, half-way
through its body, with the turn running and nothing read, after the response
head, in the middle of the event stream, after the whole response) x every way
of leaving (close, reset, half-close). After each, within one virtual second
(the keep-alive timeout is five), the server's process has no more open file
descriptors and no more tasks outside the agent than before the request; then
the held turn is let go and must be committed whole, and the server still
answers. A Hypothesis test does the same at a random byte of the exchange.

The server is ``serve_agentik`` on 127.0.0.1 in the test's own trio run, with
trio's mock clock (it jumps after 50 ms of real idleness, so a write still in
the kernel is not mistaken for idleness).
"""

from __future__ import annotations

import h11
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import Role
from tests.server.rawconn import (
    ANSWER,
    STREAMED,
    TRANSPORTS,
    WAYS,
    RawClient,
    Server,
    back_to_baseline,
    health,
    request_bytes,
    running_server,
)

POINTS = ("head", "body", "request", "response-head", "mid-stream", "done")
"""Where the client leaves: see the module docstring."""
TURN_STARTED = ("request", "response-head", "mid-stream", "done")


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


CASES = [
    pytest.param(transport, point, way, id=f"{transport}-{point}-{way}")
    for transport in TRANSPORTS
    for point in POINTS
    for way in WAYS
    if transport in STREAMED or point not in ("response-head", "mid-stream")
]


async def go_to(client: RawClient, server: Server, transport: str, point: str) -> None:
    """Play the exchange up to ``point``."""
    head, body = request_bytes(transport, "c1")
    if point == "head":
        await client.send(head[: len(head) // 2])
        return
    if point == "body":
        await client.send(head + body[: len(body) // 2])
        return
    await client.send(head + body)
    client.request_sent(head, body)
    await server.model.waiting.wait()
    if point == "request":
        return
    if point == "done":
        server.model.release.set()
    assert isinstance(await client.read_event(), h11.Response)
    if point == "response-head":
        return
    if point == "mid-stream":
        streamed = b""
        while b"\n\n" not in streamed:  # one whole SSE frame, the turn still held
            event = await client.read_event()
            assert isinstance(event, h11.Data), event
            streamed += event.data
        return
    while not isinstance(await client.read_event(), h11.EndOfMessage):
        pass


async def leave_and_check(client: RawClient, server: Server, way: str) -> None:
    """Leave; the server must close its side and free everything at once."""
    client.leave(way)
    if way == "half-close":
        with trio.fail_after(1):
            assert await client.closed_by_server()
        client.sock.close()
    await back_to_baseline(server)


async def check_turn(server: Server, started: bool | None) -> None:
    """Let the held turn go: it finishes and commits whole, or never began
    (``started`` None: either, as when the client left with the last byte of
    its request, which the server may or may not have read)."""
    server.model.release.set()
    for _ in range(3):  # the turn runs to its end without waiting on anything
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(0.01)
    messages = await server.stored("c1")
    if started is False or (started is None and not messages):
        assert messages == []
        return
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert messages[-1].content == ANSWER


@pytest.mark.parametrize(("transport", "point", "way"), CASES)
async def test_a_client_that_leaves_frees_its_connection_at_once(
    transport: str, point: str, way: str, clock: trio.testing.MockClock
) -> None:
    async with running_server() as server:
        client = await RawClient.connect(server.port)
        await go_to(client, server, transport, point)
        await leave_and_check(client, server, way)
        await check_turn(server, started=point in TURN_STARTED)
        await back_to_baseline(server)  # the turn's end brought nothing back
        assert await health(server.port) == 200
        await back_to_baseline(server)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    transport=st.sampled_from(TRANSPORTS),
    way=st.sampled_from(WAYS),
    offset=st.integers(min_value=0, max_value=2_500),
)
def test_leaving_at_any_byte_frees_the_connection(transport: str, way: str, offset: int) -> None:
    """The client leaves after ``offset`` bytes of the exchange: that many
    request bytes if the request is longer, else the whole request and
    ``offset - len(request)`` response bytes (the turn held while the server
    has more to send, let go when it has not)."""

    async def main() -> None:
        async with running_server() as server:
            head, body = request_bytes(transport, "c1")
            request = head + body
            client = await RawClient.connect(server.port)
            await client.send(request[:offset])
            wanted = offset - len(request)
            while len(client.received) < wanted:
                with trio.move_on_after(1) as stalled:  # virtual: the server has nothing to send
                    data = await client.sock.recv(wanted - len(client.received))
                    if not data:
                        break
                    client.received += data
                if stalled.cancelled_caught:
                    if server.model.release.is_set():
                        break
                    server.model.release.set()
            await leave_and_check(client, server, way)
            started = None if offset == len(request) else offset > len(request)
            await check_turn(server, started=started)
            await back_to_baseline(server)
            assert await health(server.port) == 200
            await back_to_baseline(server)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))


@pytest.mark.parametrize("way", ["close", "reset"])
async def test_a_client_that_pipelined_a_request_is_freed_at_the_next_write(
    way: str, clock: trio.testing.MockClock
) -> None:
    """With a second request queued behind a stream, the read loop waits for
    the stream to end (HTTP/1.1 answers in order) and cannot see the client
    leave; the next write to the gone client finds it, and then the whole
    connection ends, not only its response."""
    async with running_server() as server:
        client = await RawClient.connect(server.port)
        head, body = request_bytes("native-sse", "c1")
        await client.send(head + body + b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        client.request_sent(head, body)
        await server.model.waiting.wait()
        assert isinstance(await client.read_event(), h11.Response)
        client.leave(way)
        server.model.release.set()  # the turn goes on and writes its frames
        await back_to_baseline(server)
        await check_turn(server, started=True)
