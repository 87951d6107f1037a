"""The forwarding proxy (``agentik.server._forward``) between two real HTTP
servers on 127.0.0.1: a node whose handler raises ``Redirect`` (the app's own
handler for it, ``_app._http_error``, orders the forward) and an "owner" that
answers what it received.

- Whatever the request (method, percent-encoded path, query, headers, body),
  the owner receives it as sent, with ``agentik-forwarded`` and without the
  client's connection headers, and the client gets the owner's status,
  headers and body as they are.
- An owner that answers 307 or does not answer is asked about again, the
  request run again here, until ``takeover_wait``; then 503.
- A request no node holds right now (``NotHere``: a shard being handed off,
  a lapsed lease), here or at the owner, waits and is asked about again,
  until ``takeover_wait``; a direct client of a node that does not forward
  gets the 503 without the hop's marker.
- An answer the owner breaks off after its first bytes is never retried.
- A client that leaves mid-stream closes the owner's stream.

Both servers run in one thread with their own trio loop for the module (as
test_fuzz_http does); the tests are plain functions with a real client.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any
from urllib.parse import quote, urlencode

import attrs
import httpx2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse

from agentik.server._app import _http_error
from agentik.server._forward import FORWARDED, NOT_HERE, Forwarder
from agentik.server._peers import PeerClient
from agentik.server.http import CANCELS, NotHere, Redirect
from agentik.server.http import serve as http_serve
from tests.asgi import answer_lifespan, read_body

WAIT = 0.6
"""``takeover_wait`` of the forwarding node, in seconds."""


@attrs.define(repr=False)
class Owner:
    """Answers with what it received (JSON), as the request's ``x-answer-*``
    headers ask; ``/broken`` breaks off its answer, ``/endless`` streams until
    the client leaves."""

    requests: list[dict[str, Any]] = attrs.Factory(list)
    left: threading.Event = attrs.Factory(threading.Event)
    moved: bool = False
    """Answer 307, as a node that no longer owns the conversation does."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = await read_body(receive)
        seen = {
            "method": scope["method"],
            "path": scope["raw_path"].decode("latin-1"),
            "query": scope["query_string"].decode("latin-1"),
            "headers": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in scope["headers"]],
            "body": body.hex(),
        }
        self.requests.append(seen)
        if self.moved:
            await send({"type": "http.response.start", "status": 307, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        asked = {n.decode(): v.decode("latin-1") for n, v in scope["headers"]}
        start = {"type": "http.response.start", "status": int(asked.get("x-answer-status", 200))}
        headers = [(b"content-type", b"application/json"), (b"x-echo", b"one"), (b"x-echo", b"two")]
        if scope["path"] == "/endless":  # until the client leaves: the engine then
            # cancels it (or it reads http.disconnect), and it notes the leaving
            await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
            try:
                async with trio.open_nursery() as nursery:

                    async def watch() -> None:
                        while (await receive())["type"] != "http.disconnect":
                            pass
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(watch)
                    while True:
                        chunk = {"type": "http.response.body", "body": b"data: 1\n\n"}
                        await send({**chunk, "more_body": True})
                        await trio.sleep(0.02)
            finally:
                self.left.set()
        answer = json.dumps(seen).encode()
        if scope["path"] == "/broken":
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": answer[:10], "more_body": True})
            return  # half an answer: the engine ends the connection
        pieces = max(1, int(asked.get("x-answer-pieces", 1)))
        if asked.get("x-answer-length"):
            headers.append((b"content-length", str(len(answer)).encode()))
        await send({**start, "headers": headers})
        step = max(1, -(-len(answer) // pieces))
        for at in range(0, len(answer), step):
            await send(
                {"type": "http.response.body", "body": answer[at : at + step], "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@attrs.define(repr=False)
class Unheld:
    """A node that holds no conversation yet: it refuses ``refusals[path]``
    requests with ``NotHere`` (through the app's own handler), then answers."""

    refusals: dict[str, int] = attrs.Factory(dict)
    answered: list[str] = attrs.Factory(list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await read_body(receive)
        path = scope["path"]
        if self.refusals.get(path, 0) > 0:
            self.refusals[path] -= 1
            response = await _http_error(Request(scope), NotHere("its shard is moving; retry"))
        else:
            self.answered.append(path)
            response = JSONResponse({"path": path})
        await response(scope, receive, send)


@attrs.define(repr=False)
class Servers:
    owner: Owner
    owner_url: str
    url: str
    """The forwarding node."""
    dead_url: str
    """A node that forwards to a port nothing listens on."""
    moved_url: str
    """A node that forwards to one that answers 307 (the conversation moved)."""
    runs: dict[str, int]
    """How many times each node's handler ran (first run and each retry)."""
    owner2: Owner
    owner2_url: str
    switch_url: str
    """A node that forwards to ``targets["switch"]``."""
    targets: dict[str, str]
    """Where each node's handler says the conversation's owner is."""
    unheld: Unheld
    unheld_url: str
    """``unheld`` served as it is (it does not forward)."""
    waiting_url: str
    """``unheld`` behind a ``Forwarder``: a node whose own handler says no node holds it."""
    to_unheld_url: str
    """A node that forwards to ``unheld_url``."""


def _node(
    targets: dict[str, str], runs: dict[str, int], name: str, client: PeerClient
) -> Forwarder:
    """A node whose every request is for a conversation ``targets[name]`` owns: it
    reads the body, as a turn's handler does, and refuses with ``Redirect``
    through the app's own handler for it."""

    async def owned_elsewhere(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await read_body(receive)
        runs[name] = runs.get(name, 0) + 1
        refusal = Redirect("owned by another node", base_url=targets[name])
        response = await _http_error(Request(scope), refusal)
        await response(scope, receive, send)

    return Forwarder(
        owned_elsewhere, client, node=f"node-{name}", takeover_wait=WAIT, body_limit=1 << 20
    )


METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


async def _moved(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await answer_lifespan(receive, send)
        return
    await read_body(receive)
    await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"/x")]})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    found: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> None:
        stop = trio.Event()
        found["stop"] = (stop, trio.lowlevel.current_trio_token())
        owner, owner2 = Owner(), Owner()
        runs: dict[str, int] = {}
        async with PeerClient(connect_timeout=1.0, idle_timeout=30, max_idle=64) as client:
            async with trio.open_nursery() as nursery:
                (owner_url,) = await nursery.start(
                    lambda task_status: http_serve(owner, task_status=task_status)
                )
                (owner2_url,) = await nursery.start(
                    lambda task_status: http_serve(owner2, task_status=task_status)
                )
                (moved_url,) = await nursery.start(
                    lambda task_status: http_serve(_moved, task_status=task_status)
                )
                with trio.socket.socket() as probe:  # a port nothing listens on
                    await probe.bind(("127.0.0.1", 0))
                    dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
                unheld = Unheld()
                (unheld_url,) = await nursery.start(
                    lambda task_status: http_serve(unheld, task_status=task_status)
                )
                waiting = Forwarder(
                    unheld, client, node="node-waiting", takeover_wait=WAIT, body_limit=1 << 20
                )
                (waiting_url,) = await nursery.start(
                    lambda task_status: http_serve(waiting, task_status=task_status)
                )
                urls = {}
                targets = {
                    "live": owner_url,
                    "dead": dead,
                    "moved": moved_url,
                    "switch": owner_url,
                    "to_unheld": unheld_url,
                }
                for name in targets:
                    node = _node(targets, runs, name, client)
                    (urls[name],) = await nursery.start(
                        lambda task_status, node=node: http_serve(node, task_status=task_status)
                    )
                found["servers"] = Servers(
                    owner,
                    owner_url,
                    urls["live"],
                    urls["dead"],
                    urls["moved"],
                    runs,
                    owner2,
                    owner2_url,
                    urls["switch"],
                    targets,
                    unheld,
                    unheld_url,
                    waiting_url,
                    urls["to_unheld"],
                )
                started.set()
                await stop.wait()
                nursery.cancel_scope.cancel()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as error:
            found["error"] = error
            started.set()

    thread = threading.Thread(target=run, name="forward-servers", daemon=True)
    thread.start()
    started.wait(30)
    if "servers" not in found:
        raise RuntimeError(f"the servers did not start: {found.get('error')!r}")
    yield found["servers"]
    stop, token = found["stop"]
    trio.from_thread.run_sync(stop.set, trio_token=token)
    thread.join(10)


HOP_BY_HOP = ["connection", "keep-alive", "te", "trailer", "upgrade", "proxy-authorization"]
names = st.from_regex(r"x-[a-z0-9-]{1,12}", fullmatch=True)
values = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=30)
# Not "." or "..": the sending client removes dot segments (RFC 3986 5.2.4)
# before any server sees the path, the forwarded request's as the direct one's.
segments = (
    st.text(min_size=1, max_size=12)
    .map(lambda s: quote(s, safe=""))
    .filter(lambda s: s not in (".", ".."))
)
queries = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=4).map(urlencode)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(METHODS),
    path=st.lists(segments, min_size=1, max_size=3).map(lambda p: "/" + "/".join(p)),
    query=queries,
    headers=st.lists(st.tuples(names, values), max_size=5),
    body=st.binary(max_size=3000),
    status=st.sampled_from([200, 201, 400, 404, 409, 429, 500, 503]),
    pieces=st.integers(1, 5),
    length=st.booleans(),
)
def test_the_owner_gets_the_request_as_sent_and_the_client_its_answer_as_is(
    servers: Servers,
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    status: int,
    pieces: int,
    length: bool,
) -> None:
    if method in ("GET", "DELETE"):
        body = b""
    sent = [
        *headers,
        ("authorization", "Bearer alice-token-4f1c9a0b7e2d"),
        ("x-answer-status", str(status)),
        ("x-answer-pieces", str(pieces)),
        *([("x-answer-length", "1")] if length else []),
    ]
    target = path + ("?" + query if query else "")
    before = len(servers.owner.requests)
    with httpx2.Client(timeout=10) as client:
        forwarded = client.request(
            method, servers.url + target, headers=[*sent, ("te", "trailers")], content=body
        )
        direct = client.request(method, servers.owner_url + target, headers=sent, content=body)
    assert len(servers.owner.requests) == before + 2, (forwarded.text, direct.text)
    assert forwarded.status_code == direct.status_code == status
    assert forwarded.headers.get_list("x-echo") == ["one", "two"]
    assert forwarded.headers["content-type"] == "application/json"
    seen, straight = forwarded.json(), direct.json()
    for key in ("method", "path", "query", "body"):
        assert seen[key] == straight[key]
    assert (seen["method"], seen["path"], seen["query"]) == (method, path, query)
    assert bytes.fromhex(seen["body"]) == body
    # The client's headers as the owner gets them straight, in order, but
    # those of the connection; then the hop header; nothing else.
    kept = [[n, v] for n, v in seen["headers"] if n not in ("host", "content-length")]
    expected = [
        [n, v] for n, v in straight["headers"] if n not in ("host", "content-length", *HOP_BY_HOP)
    ]
    assert kept == [*expected, [FORWARDED, "node-live"]]


def test_an_owner_that_does_not_answer_is_asked_about_again_until_takeover_wait(
    servers: Servers,
) -> None:
    """Connection refused: the request is run again here (the handler asks
    who owns it now) a few times, then 503 once ``takeover_wait`` passed."""
    runs = servers.runs.get("dead", 0)
    began = time.monotonic()
    with httpx2.Client(timeout=10) as client:
        response = client.post(servers.dead_url + "/turns", json={"text": "hi"})
    took = time.monotonic() - began
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "owner_unavailable"
    assert WAIT - 0.2 <= took < WAIT + 2
    assert servers.runs["dead"] - runs >= 3, "the handler was not asked again"


def test_an_owner_that_answers_307_is_asked_about_again(servers: Servers) -> None:
    """The conversation moved between this node's ask and the owner's: the
    307 is not passed on while the wait lasts; then 503."""
    runs = servers.runs.get("moved", 0)
    with httpx2.Client(timeout=10) as client:
        response = client.post(servers.moved_url + "/turns", json={"text": "hi"})
    assert response.status_code == 503, response.text
    assert servers.runs["moved"] - runs >= 3


def test_a_request_forwarded_again_is_answered_307(servers: Servers) -> None:
    """The loop guard: a request that carries the hop header is not forwarded."""
    before = len(servers.owner.requests)
    with httpx2.Client(timeout=10) as client:
        response = client.post(
            servers.url + "/turns", json={"text": "hi"}, headers={FORWARDED: "node-x"}
        )
    assert response.status_code == 307, response.text
    assert response.headers["location"] == servers.owner_url + "/turns"
    assert len(servers.owner.requests) == before


def test_an_answer_broken_off_after_its_first_bytes_is_never_retried(servers: Servers) -> None:
    before = len(servers.owner.requests)
    with httpx2.Client(timeout=10) as client, pytest.raises(httpx2.RemoteProtocolError):
        client.post(servers.url + "/broken", json={"text": "hi"})
    time.sleep(WAIT)  # a retry would have reached the owner by now
    assert len(servers.owner.requests) == before + 1


def test_a_client_that_leaves_mid_stream_closes_the_owners_stream(servers: Servers) -> None:
    servers.owner.left.clear()
    with httpx2.Client(timeout=10) as client:
        with client.stream("POST", servers.url + "/endless", content=b"{}") as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                assert chunk.startswith(b"data: 1")
                break
    assert servers.owner.left.wait(5), "the owner's stream went on after the client left"


@pytest.mark.parametrize("engine_cancels", [False, True])
def test_a_client_that_leaves_under_another_server_closes_the_owners_stream(
    servers: Servers, engine_cancels: bool
) -> None:
    """Under an ASGI server that does not cancel an app whose client left (no
    ``CANCELS`` in the scope), the forwarder watches ``receive`` itself: the
    ``http.disconnect`` ends the proxied stream and the owner sees the leave.
    With ``CANCELS`` set the forwarder leaves that to the engine: nothing here
    cancels it, so the stream goes on until the test's own deadline."""
    servers.owner.left.clear()
    outcome: dict[str, bool] = {}

    async def main() -> None:
        async with PeerClient(connect_timeout=1.0, idle_timeout=30, max_idle=4) as client:
            node = _node({"other": servers.owner_url}, {}, "other", client)
            first_piece = trio.Event()
            body_given = False

            async def receive() -> dict[str, Any]:
                nonlocal body_given
                if not body_given:
                    body_given = True
                    return {"type": "http.request", "body": b"{}", "more_body": False}
                await first_piece.wait()
                return {"type": "http.disconnect"}

            async def send(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.body" and message.get("body"):
                    first_piece.set()

            scope: dict[str, Any] = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": "/endless",
                "raw_path": b"/endless",
                "query_string": b"",
                "root_path": "",
                "headers": [(b"host", b"node"), (b"content-type", b"application/json")],
                "client": ("127.0.0.1", 1),
                "server": ("127.0.0.1", 2),
            }
            if engine_cancels:
                scope[CANCELS] = True
            with trio.move_on_after(3) as waited:
                await node(scope, receive, send)
            outcome["returned"] = not waited.cancelled_caught

    trio.run(main)
    assert outcome["returned"] is not engine_cancels
    assert servers.owner.left.wait(5), "the owner's stream went on after the client left"


def test_a_conversation_route_goes_to_its_known_owner_straight_until_that_fails(
    servers: Servers,
) -> None:
    """A native conversation route forwarded once goes to that owner again
    without running the handler (no database question); when that owner
    answers it no longer owns it (307), the handler runs, names the new
    owner, and the route goes there from then on. A2A's path names no
    conversation: its handler runs each time."""
    path = "/agentik/conversations/sw1/turns"
    servers.owner.moved = False
    servers.targets["switch"] = servers.owner_url
    runs = servers.runs.get("switch", 0)
    before, before2 = len(servers.owner.requests), len(servers.owner2.requests)
    with httpx2.Client(timeout=10) as client:
        for text in ("a", "b", "c"):
            response = client.post(servers.switch_url + path, json={"text": text})
            assert response.status_code == 200, response.text
            assert bytes.fromhex(response.json()["body"]) == f'{{"text":"{text}"}}'.encode()
        assert servers.runs["switch"] - runs == 1, "the handler ran for a known route"
        assert len(servers.owner.requests) - before == 3
        # The conversation moved to owner2; the old owner says so.
        servers.owner.moved = True
        servers.targets["switch"] = servers.owner2_url
        try:
            for text in ("d", "e"):
                response = client.post(servers.switch_url + path, json={"text": text})
                assert response.status_code == 200, response.text
                assert bytes.fromhex(response.json()["body"]) == f'{{"text":"{text}"}}'.encode()
        finally:
            servers.owner.moved = False
        assert servers.runs["switch"] - runs == 2, "the handler ran once more, after the 307"
        assert len(servers.owner.requests) - before == 4, "the old owner was tried once"
        assert len(servers.owner2.requests) - before2 == 2
        for _ in range(2):
            assert client.post(servers.switch_url + "/a2a", json={}).status_code == 200
        assert servers.runs["switch"] - runs == 4, "A2A's handler ran for each request"


def test_a_request_no_node_holds_yet_waits_for_its_next_holder(servers: Servers) -> None:
    """``NotHere`` on the node the client reached (its shard is being handed
    off): no 503 while the wait lasts; the request runs again until a node
    holds it, or 503 ``owner_unavailable`` once ``takeover_wait`` passed."""
    servers.unheld.refusals.update({"/w1": 3, "/w2": 10_000})
    with httpx2.Client(timeout=10) as client:
        response = client.post(servers.waiting_url + "/w1", json={"text": "hi"})
        assert response.status_code == 200, response.text
        assert response.json() == {"path": "/w1"}
        assert servers.unheld.refusals["/w1"] == 0
        began = time.monotonic()
        response = client.post(servers.waiting_url + "/w2", json={"text": "hi"})
        took = time.monotonic() - began
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "owner_unavailable"  # the guard adds Retry-After
    assert WAIT - 0.2 <= took < WAIT + 2
    assert servers.unheld.refusals["/w2"] < 10_000 - 2, "it was not asked again"


def test_an_owner_that_does_not_hold_it_now_is_asked_about_again(servers: Servers) -> None:
    """The owner answers a forwarded request ``NotHere`` (its lease lapsed,
    the shard moving): 503 with ``agentik-not-here``, which the forwarding
    node does not pass on but waits and asks again; a client that reached
    that node itself gets the plain 503 with ``Retry-After``."""
    servers.unheld.refusals.update({"/w3": 2, "/w4": 1})
    runs = servers.runs.get("to_unheld", 0)
    with httpx2.Client(timeout=10) as client:
        response = client.post(servers.to_unheld_url + "/w3", json={"text": "hi"})
        assert response.status_code == 200, response.text
        assert response.json() == {"path": "/w3"}
        assert servers.runs["to_unheld"] - runs == 3, "the handler was not asked again"
        direct = client.post(servers.unheld_url + "/w4", json={"text": "hi"})
    assert direct.status_code == 503, direct.text
    assert direct.json()["error"]["code"] == "unavailable"
    assert direct.headers["retry-after"] == "1"
    assert NOT_HERE not in direct.headers
