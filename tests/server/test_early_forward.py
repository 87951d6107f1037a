"""The early forward (``agentik.server._early``): the HTTP engine relays a
request whose owner is known right after its head, as bytes, before any
scope, app or ``Forwarder``; between real servers on 127.0.0.1 in the
test's own trio run, a raw client read with h11.

- A known route's request reaches the owner with ``agentik-forwarded`` and
  without the client's connection fields, the node's app never runs, and the
  owner's answer comes back as it was, by length or chunked; an SSE stream
  piece by piece as the owner sends each; the client's connection stays in
  step (a second request on it, a pipelined one too).
- A client that leaves mid-stream closes the owner's connection.
- An owner that is unreachable, closes before answering, answers 307 or a
  503 ``agentik-not-here``: the request is served by the app after all (as
  the app's own forward would), the route forgotten. An owner that breaks
  off mid-answer ends the client's connection, and is not asked again.
- What the engine does not relay goes to the app unchanged: a request with
  the hop header (the loop guard), a chunked body, a body past the limit,
  another owner's route of the same path, no valid token. A smuggling
  attempt (Content-Length with Transfer-Encoding) is refused as before, and
  nothing reaches the owner.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import h11
import pytest
import trio

from agentik.server._early import EarlyForward
from agentik.server._forward import FORWARDED, NOT_HERE, Forwarder
from agentik.server._owners import Authenticator, Caller
from agentik.server._peers import PeerClient
from agentik.server.http import serve as http_serve
from tests.asgi import answer_lifespan, read_body

ALICE, BOB = b"alice-token-0123456789", b"bob-token-0123456789"
CONVERSATION = "/agentik/conversations/c1"
LIMIT = 4096


def _auth() -> Authenticator:
    return Authenticator(
        required=True,
        digests=(
            (hashlib.sha256(ALICE).digest(), Caller("alice")),
            (hashlib.sha256(BOB).digest(), Caller("bob")),
        ),
    )


@attrs.define
class Owner:
    """The owner: answers what it received, by length or chunked, as a stream
    the test paces, endlessly, moved (307), not here (503), or broken off."""

    requests: list[dict[str, Any]] = attrs.Factory(list)
    go: trio.Event = attrs.Factory(trio.Event)
    """Lets ``/stream`` send its second event."""
    left: trio.Event = attrs.Factory(trio.Event)
    """``/endless`` saw its client leave."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = await read_body(receive)
        seen = {
            "method": scope["method"],
            "target": scope["raw_path"].decode()
            + "?" * bool(scope["query_string"])
            + scope["query_string"].decode(),
            "headers": [[n.decode(), v.decode()] for n, v in scope["headers"]],
            "body": body.decode(),
            "peer": scope["client"][1],
        }
        self.requests.append(seen)
        kind = scope["path"].rsplit("/", 1)[-1]
        start: dict[str, Any] = {"type": "http.response.start", "status": 200}
        more = {"type": "http.response.body", "more_body": True}
        if kind == "moved":
            await send({**start, "status": 307, "headers": [(b"location", b"/x")]})
            await send({"type": "http.response.body", "body": b""})
        elif kind == "nothere":
            headers = [(NOT_HERE.encode(), b"1"), (b"retry-after", b"1")]
            await send({**start, "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
        elif kind == "stream":
            await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
            await send({**more, "body": b"data: 1\n\n"})
            await self.go.wait()
            await send({**more, "body": b"data: 2\n\n"})
            await send({"type": "http.response.body", "body": b""})
        elif kind == "endless":
            await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
            try:
                while True:
                    await send({**more, "body": b"data: 1\n\n"})
                    await trio.sleep(0.01)  # the owner's pace, not the test's
            finally:
                self.left.set()
        elif kind == "broken":
            await send({**start, "headers": [(b"content-type", b"text/plain")]})
            await send({**more, "body": b"half"})  # then returns: the engine ends it
        else:
            answer = json.dumps(seen).encode()
            headers = [(b"content-type", b"application/json"), (b"x-echo", b"1")]
            if kind == "chunked":
                await send({**start, "headers": headers})
                for at in range(0, len(answer), 7):
                    await send({**more, "body": answer[at : at + 7]})
                await send({"type": "http.response.body", "body": b""})
            else:
                headers.append((b"content-length", str(len(answer)).encode()))
                if any(n == b"x-close" for n, _ in scope["headers"]):
                    headers.append((b"connection", b"close"))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": answer})


@attrs.define
class Node:
    url: str
    owner: Owner
    owner_url: str
    forwarder: Forwarder
    counts: collections.Counter[str]
    served_here: list[str]

    def know(
        self, path: str, method: bytes = b"POST", *, who: str = "alice", url: str = ""
    ) -> None:
        """The node has forwarded ``path`` of ``who`` to the owner (or ``url``) once."""
        self.forwarder.owners[(Caller(who), method, path.encode())] = url or self.owner_url

    def known(self, path: str, method: bytes = b"POST", who: str = "alice") -> bool:
        return (Caller(who), method, path.encode()) in self.forwarder.owners

    @property
    def relayed(self) -> int:
        return sum(self.counts.values())


@asynccontextmanager
async def cluster() -> AsyncIterator[Node]:
    """An owner, and a node that knows no route yet: its app answers "here"."""
    owner = Owner()
    served_here: list[str] = []

    async def here(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await read_body(receive)
        served_here.append(scope["path"])
        body = b'{"served": "here"}'
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    counts: collections.Counter[str] = collections.Counter()
    async with PeerClient(connect_timeout=2, idle_timeout=30, max_idle=8) as client:
        forwarder = Forwarder(here, client, node="node-a", takeover_wait=0, body_limit=LIMIT)
        early = EarlyForward(forwarder, _auth(), counts, body_limit=LIMIT)
        async with trio.open_nursery() as nursery:
            (owner_url,) = await nursery.start(partial(http_serve, owner))
            (url,) = await nursery.start(partial(http_serve, forwarder, relay=early))
            with trio.fail_after(20):
                yield Node(url, owner, owner_url, forwarder, counts, served_here)
            nursery.cancel_scope.cancel()


def request(
    method: str,
    path: str,
    body: bytes = b"",
    *,
    token: bytes = ALICE,
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: node"]
    if token:
        lines.append(f"authorization: Bearer {token.decode()}")
    lines += [f"{name}: {value}" for name, value in extra]
    if body or method == "POST":
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@attrs.define
class Answer:
    status: int
    headers: dict[bytes, bytes]
    pieces: list[bytes]

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)

    def json(self) -> Any:
        return json.loads(self.body)


@attrs.define
class Client:
    """A raw keep-alive connection, its answers read by h11 one at a time."""

    stream: trio.SocketStream
    rest: bytes = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def answer(
        self,
        method: str = "POST",
        *,
        until_piece: int = 0,
        on_piece: Callable[[bytes], None] = lambda _: None,
    ) -> Answer:
        """The next answer whole (``on_piece`` called with each piece of its
        body as it comes); or, with ``until_piece``, once that many pieces
        came (the rest left unread)."""
        reader = h11.Connection(h11.CLIENT)
        reader.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
        reader.send(h11.EndOfMessage())
        data, self.rest = self.rest, b""
        answer: Answer | None = None
        while True:
            if data:
                reader.receive_data(data)
                data = b""
            event = reader.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                if not data:
                    reader.receive_data(b"")
                continue
            if isinstance(event, h11.Response):
                answer = Answer(event.status_code, dict(event.headers.raw_items()), [])
            elif isinstance(event, h11.Data):
                assert answer is not None
                answer.pieces.append(bytes(event.data))
                on_piece(bytes(event.data))
                if until_piece and len(answer.pieces) >= until_piece:
                    return answer
            elif isinstance(event, h11.EndOfMessage):
                assert answer is not None
                self.rest = bytes(reader.trailing_data[0])
                return answer
            else:
                raise AssertionError(f"unexpected {event!r}")

    async def closed(self) -> bool:
        """The server closed the connection (nothing more came before its end)."""
        return await self.stream.receive_some(65536) == b""


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Client]:
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        yield Client(stream)


async def test_a_known_route_is_relayed_by_the_engine_as_the_owner_answered() -> None:
    """By length, then chunked, on one client connection: the owner gets the
    request with the hop header and without the connection's fields; the
    node's app never runs; the client gets the owner's answer as it was."""
    async with cluster() as node, connect(node.url) as client:
        for kind in ("json", "chunked"):
            node.know(f"{CONVERSATION}/{kind}")
        extra = (("x-a", "1"), ("te", "trailers"), ("keep-alive", "5"), ("x-b", "2"))
        body = b'{"text":"hi"}'
        await client.send(request("POST", f"{CONVERSATION}/json?q=1", body, extra=extra))
        first = await client.answer()
        await client.send(request("POST", f"{CONVERSATION}/chunked", b"x" * 100))
        second = await client.answer()
    assert node.served_here == []
    assert node.relayed == 2
    assert first.status == second.status == 200
    assert first.headers[b"content-length"] == str(len(first.body)).encode()
    assert second.headers[b"transfer-encoding"] == b"chunked"
    assert b"content-length" not in second.headers
    assert first.headers[b"x-echo"] == second.headers[b"x-echo"] == b"1"
    seen = first.json()
    assert seen == node.owner.requests[0]
    assert (seen["method"], seen["target"], seen["body"]) == (
        "POST",
        f"{CONVERSATION}/json?q=1",
        '{"text":"hi"}',
    )
    names = [n for n, _ in seen["headers"]]
    assert names == ["host", "authorization", "x-a", "x-b", FORWARDED, "content-length"]
    assert dict(seen["headers"])[FORWARDED] == "node-a"
    assert second.json()["body"] == "x" * 100


async def test_a_stream_is_relayed_piece_by_piece_as_the_owner_sends_it() -> None:
    """The owner sends its second event only once the client has the first:
    an answer held back until its end would never come (the test's deadline)."""
    async with cluster() as node, connect(node.url) as client:
        node.know(f"{CONVERSATION}/stream")
        await client.send(request("POST", f"{CONVERSATION}/stream", b"{}"))

        def got(piece: bytes) -> None:
            if piece == b"data: 1\n\n":
                node.owner.go.set()

        answer = await client.answer(on_piece=got)
        assert answer.status == 200
        assert answer.headers[b"content-type"] == b"text/event-stream"
        assert answer.headers[b"transfer-encoding"] == b"chunked"
        assert answer.pieces == [b"data: 1\n\n", b"data: 2\n\n"]
        # The connection is in step: the next request is answered on it.
        node.know(f"{CONVERSATION}/json")
        await client.send(request("POST", f"{CONVERSATION}/json", b"{}"))
        assert (await client.answer()).status == 200
    assert node.relayed == 2
    assert node.served_here == []


async def test_a_pipelined_request_after_a_relayed_one_is_answered_in_turn() -> None:
    """Two requests in one write, the first relayed, the second served by the
    app, then two relayed: each answer whole, in order."""
    async with cluster() as node, connect(node.url) as client:
        node.know(f"{CONVERSATION}/json")
        node.know(f"{CONVERSATION}/chunked")
        await client.send(
            request("POST", f"{CONVERSATION}/json", b"one")
            + request("POST", "/elsewhere", b"two")
            + request("POST", f"{CONVERSATION}/chunked", b"three")
            + request("POST", f"{CONVERSATION}/json", b"four")
        )
        answers = [await client.answer() for _ in range(4)]
    assert [a.status for a in answers] == [200] * 4
    assert answers[0].json()["body"] == "one"
    assert answers[1].json() == {"served": "here"}
    assert answers[2].json()["body"] == "three"
    assert answers[3].json()["body"] == "four"
    assert [r["body"] for r in node.owner.requests] == ["one", "three", "four"]
    assert node.served_here == ["/elsewhere"]


async def test_a_client_that_leaves_mid_stream_closes_the_owners_connection() -> None:
    async with cluster() as node:
        node.know(f"{CONVERSATION}/endless")
        async with connect(node.url) as client:
            await client.send(request("POST", f"{CONVERSATION}/endless", b"{}"))
            first = await client.answer(until_piece=1)
            assert first.pieces == [b"data: 1\n\n"]
        await node.owner.left.wait()  # the owner's stream was ended: its client left


async def test_a_head_request_is_relayed_without_a_body() -> None:
    async with cluster() as node, connect(node.url) as client:
        node.know(f"{CONVERSATION}/json", b"HEAD")
        await client.send(request("HEAD", f"{CONVERSATION}/json"))
        answer = await client.answer("HEAD")
        node.know(f"{CONVERSATION}/json", b"GET")
        await client.send(request("GET", f"{CONVERSATION}/json"))
        after = await client.answer("GET")
    assert answer.status == 200
    assert answer.pieces == []
    assert int(answer.headers[b"content-length"]) > 0
    assert after.json()["method"] == "GET"
    assert node.relayed == 2


@pytest.mark.parametrize("kind", ["moved", "nothere"])
async def test_an_owner_that_does_not_answer_for_it_sends_the_request_to_the_app(
    kind: str,
) -> None:
    """307 (it moved) or 503 with ``agentik-not-here``: not passed on; the app
    serves the request (the body read again), and the route is forgotten."""
    path = f"{CONVERSATION}/{kind}"
    async with cluster() as node, connect(node.url) as client:
        node.know(path)
        await client.send(request("POST", path, b"body"))
        answer = await client.answer()
    assert answer.json() == {"served": "here"}
    assert node.served_here == [path]
    assert len(node.owner.requests) == 1
    assert not node.known(path)
    assert node.relayed == 0


async def test_an_unreachable_owner_sends_the_request_to_the_app() -> None:
    """Nothing listens at the owner's address, or it closes before any byte
    of an answer: the app serves the request, the route is forgotten."""
    async with cluster() as node, trio.open_nursery() as nursery:
        with trio.socket.socket() as probe:
            await probe.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{probe.getsockname()[1]}"

        async def hang_up(stream: trio.SocketStream) -> None:
            async with stream:
                await stream.receive_some(65536)

        listeners = await nursery.start(trio.serve_tcp, hang_up, 0)
        port = listeners[0].socket.getsockname()[1]
        closing = f"http://127.0.0.1:{port}"
        async with connect(node.url) as client:
            for n, url in enumerate((dead, closing)):
                path = f"{CONVERSATION}/json{n}"
                node.know(path, url=url)
                await client.send(request("POST", path, b"body"))
                answer = await client.answer()
                assert answer.json() == {"served": "here"}
                assert not node.known(path)
        nursery.cancel_scope.cancel()
    assert node.served_here == [f"{CONVERSATION}/json0", f"{CONVERSATION}/json1"]


async def test_an_answer_broken_off_ends_the_clients_connection_and_is_not_retried() -> None:
    async with cluster() as node, connect(node.url) as client:
        node.know(f"{CONVERSATION}/broken")
        await client.send(request("POST", f"{CONVERSATION}/broken", b"{}"))
        with pytest.raises(h11.RemoteProtocolError):
            await client.answer()
    assert len(node.owner.requests) == 1
    assert node.served_here == []


async def test_what_the_engine_does_not_relay_goes_to_the_app() -> None:
    """The loop guard (the hop header), bob's request for the path alice's
    route knows, no token or a wrong one, a body past the limit, a chunked
    body, HTTP/1.0: none is relayed; the app serves each."""
    path = f"{CONVERSATION}/json"
    async with cluster() as node, connect(node.url) as client:
        node.know(path)
        token = b"authorization: Bearer " + ALICE
        sent = [
            request("POST", path, b"{}", extra=((FORWARDED, "node-b"),)),
            request("POST", path, b"{}", token=BOB),
            request("POST", path, b"{}", token=b""),
            request("POST", path, b"{}", token=b"wrong-token-0123456789"),
            request("POST", path, b"x" * (LIMIT + 1)),
            b"POST %s HTTP/1.1\r\nhost: node\r\n%s\r\ntransfer-encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\n0\r\n\r\n" % (path.encode(), token),
            b"POST %s HTTP/1.0\r\n%s\r\ncontent-length: 2\r\n\r\n{}" % (path.encode(), token),
        ]
        for data in sent:
            await client.send(data)
            assert (await client.answer()).json() == {"served": "here"}
        assert await client.closed()  # after the HTTP/1.0 one
    assert node.relayed == 0
    assert node.owner.requests == []
    assert node.served_here == [path] * len(sent)


@pytest.mark.parametrize(
    "fields",
    [
        "content-length: 5\r\ntransfer-encoding: chunked",
        "transfer-encoding: chunked\r\ncontent-length: 5",
        "content-length: 5\r\ncontent-length: 6",
    ],
)
async def test_a_smuggling_attempt_on_a_known_route_is_refused(fields: str) -> None:
    """Conflicting framings: 400 and the connection closed, as for any route;
    nothing reaches the owner, the hidden request least of all."""
    path = f"{CONVERSATION}/json"
    hidden = request("POST", path, b"hidden")
    async with cluster() as node, connect(node.url) as client:
        node.know(path)
        await client.send(
            f"POST {path} HTTP/1.1\r\nhost: node\r\nauthorization: Bearer {ALICE.decode()}\r\n"
            f"{fields}\r\n\r\n0\r\n\r\n".encode()
            + hidden
        )
        answer = await client.answer()
        assert answer.status == 400
        assert await client.closed()
    assert node.owner.requests == []
    assert node.relayed == 0


async def test_the_owners_keep_alive_connection_is_used_again() -> None:
    """The owner's connection is given back once an answer is whole: ten
    relayed requests, one connection to the owner."""
    async with cluster() as node, connect(node.url) as client:
        for kind in ("json", "chunked"):
            node.know(f"{CONVERSATION}/{kind}")
        for n in range(10):
            kind = ("json", "chunked")[n % 2]
            await client.send(request("POST", f"{CONVERSATION}/{kind}", b"%d" % n))
            assert (await client.answer()).json()["body"] == str(n)
    assert len(node.owner.requests) == 10
    assert len({r["peer"] for r in node.owner.requests}) == 1
    assert node.relayed == 10


async def test_the_owners_connection_fields_stay_with_its_connection() -> None:
    """An owner's ``Connection: close`` ends the owner's connection, not the
    client's: the client does not see it and sends its next request on."""
    path = f"{CONVERSATION}/json"
    async with cluster() as node, connect(node.url) as client:
        node.know(path)
        await client.send(request("POST", path, b"one", extra=(("x-close", "1"),)))
        first = await client.answer()
        await client.send(request("POST", path, b"two"))
        second = await client.answer()
    assert b"connection" not in first.headers
    assert (first.json()["body"], second.json()["body"]) == ("one", "two")
    peers = [r["peer"] for r in node.owner.requests]
    assert peers[0] != peers[1], "the owner's closed connection was used again"
    assert node.relayed == 2


async def test_an_answer_the_close_ends_closes_the_clients_connection_too() -> None:
    """An owner's answer with neither length nor chunks ends with its
    connection: relayed with ``Connection: close``, whole, then the client's
    connection closes."""

    async def owner(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhel")
            await stream.send_all(b"lo")

    async with cluster() as node, trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, owner, 0)
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        path = f"{CONVERSATION}/json"
        node.know(path, url=url)
        async with connect(node.url) as client:
            await client.send(request("POST", path, b"{}"))
            answer = await client.answer()
            assert await client.closed()
        nursery.cancel_scope.cancel()
    assert answer.headers[b"connection"] == b"close"
    assert answer.body == b"hello"
    assert node.relayed == 1
