"""A request the server refuses is one INFO (or WARNING) line in the log, and
the client gets its 4xx; never an ERROR with the app's traceback, which any
client could otherwise repeat to fill the log.

The class: a valid head on every body route, then a chunked body that goes
wrong (a bad chunk size, data longer than its size, a bad line end, a
malformed trailer, framing past its bound, random bytes), sent at once or
after the app has begun to wait for the body. Before the fix, the refusal
woke the app, which found its body cut short and answered on its own: an
ASGI ``'http.response.start' sent twice`` and a ``ClientDisconnect``
traceback at ERROR, and an access line with a status (500) nobody received.

``serve_agentik`` on 127.0.0.1 (``tests.server.rawconn``: in-memory storage,
a scripted model) in a trio run per example, under trio's mock clock.
"""

from __future__ import annotations

import contextlib
import logging

import h11
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.rawconn import RawClient, running_server

ROUTES = [
    ("POST", "/agentik/conversations/c1/turns"),
    ("POST", "/agui"),
    ("POST", "/a2a"),
    ("PUT", "/agentik/skills/s1"),
    ("POST", "/agentik/conversations/c1/approvals/call-1"),
]
DEFECTS = [
    b"zz\r\n",  # not a chunk size
    b"-1\r\n",
    b"3\r\nabcX",  # data longer than its size
    b"3\r\nabc\n\n",  # a line end that is not CRLF
    b"0\r\nno colon\r\n\r\n",  # a malformed trailer
    b"0\r\n: x\r\n\r\n",
    b"ffffffffffffffffffff\r\n",  # a size past 64 bits
    b"1;\x00\r\nx\r\n",
    b"3;x=" + b"a" * 40_000,  # an extension past the framing bound: 431
    b"0\r\nX: " + b"a" * 40_000,  # a trailer past it
]


@st.composite
def malformed(draw: st.DrawFn) -> bytes:
    """Valid chunks, then a defect (or random bytes)."""
    chunks = draw(st.lists(st.binary(min_size=1, max_size=40), max_size=3))
    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    defect = draw(st.sampled_from(DEFECTS) | st.binary(min_size=1, max_size=30))
    return framed + defect


def head(method: str, path: str) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "A2A-Version: 1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()


async def exchange(port: int, route: tuple[str, str], body: bytes, wait_first: bool) -> bytes:
    """Send the head, then (once the app waits for it, if ``wait_first``) the
    body; read until the server closes."""
    client = await RawClient.connect(port)
    try:
        await client.send(head(*route))
        if wait_first:
            await trio.testing.wait_all_tasks_blocked()
        with contextlib.suppress(OSError):  # the server refused already (a long defect)
            await client.send(body)
        await client.closed_by_server()
        return client.received
    finally:
        client.sock.close()


def final_status(received: bytes) -> int | None:
    """The status of the response in ``received``; None if none came."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("Host", "t")]))
    client.receive_data(received)
    client.receive_data(b"")
    try:
        event = client.next_event()
        while isinstance(event, h11.InformationalResponse):
            event = client.next_event()
    except h11.RemoteProtocolError:
        return None
    return event.status_code if isinstance(event, h11.Response) else None


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    requests=st.lists(
        st.tuples(st.sampled_from(ROUTES), malformed(), st.booleans()), min_size=1, max_size=4
    )
)
def test_a_malformed_body_is_one_line_and_a_4xx(
    caplog: pytest.LogCaptureFixture, requests: list[tuple[tuple[str, str], bytes, bool]]
) -> None:
    async def main() -> None:
        async with running_server() as server:
            for route, body, wait_first in requests:
                caplog.clear()
                received = await exchange(server.port, route, body, wait_first)
                await trio.testing.wait_all_tasks_blocked()
                lines = [r for r in caplog.records if r.levelno >= logging.INFO]
                assert len(lines) == 1, [r.getMessage() for r in lines]
                [line] = lines
                assert line.levelno in (logging.INFO, logging.WARNING), line.getMessage()
                assert line.exc_info is None, line.getMessage()
                status = final_status(received)
                # A 4xx the server or the app chose (random bytes may make a
                # whole body: then the app refuses it, 400 or 422), never 5xx.
                assert status is not None and 400 <= status < 500, received
                assert f"status={status}" in line.getMessage(), (line.getMessage(), status)

    caplog.set_level(logging.INFO)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))
