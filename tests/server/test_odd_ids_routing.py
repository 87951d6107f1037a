"""Conversation ids with odd bytes (tests/server/odd_ids.py) through real
servers, as raw request bytes (an HTTP client would normalise them):

- one ``serve_agentik`` in-process: every such path is served for the
  conversation HAProxy hashes (the id percent-decoded once), or refused with
  a clear 4xx that changes nothing; never a 5xx, never a dropped connection.
  An id with an encoded ``/`` is refused (the router would serve its first
  part); a trailing ``/`` is redirected to the path as sent, less the ``/``
  (Starlette's own redirect decoded the id once: ``a%2541`` went to ``a%41``,
  which is ``aA``, another conversation);
- the real HAProxy computes the shard as ``odd_ids.haproxy_shard`` does;
- two ``agentik serve`` nodes on PostgreSQL: a request sent to the node that
  does not hold the conversation's shard reaches the holder with its path as
  sent (the same conversation) and comes back with the holder's answer as
  the holder gives it; behind the shipped HAProxy configuration, an odd id's
  turns after its first take no hop, and an id HAProxy cannot decode
  (``50%off``) is still answered right.

Hypothesis drives the examples from a worker thread (``_check``), each one
a trio call back into the test's run, so the servers start once a test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import attrs
import h11
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentik.server.http import url_text
from agentik.storage import shard_of
from tests.cluster import (
    Node,
    RecordingModel,
    free_port,
    owner_url,
    shards_spread,
    start_node,
    stop_nodes,
)
from tests.kits import missing_kit
from tests.postgres import fresh_database
from tests.server.conftest import Running
from tests.server.odd_ids import NATIVE, haproxy_segment, haproxy_shard, segments, suffixes

REFUSALS = {400, 404, 405, 422, 431}
"""What a bad path may get: a clear client error."""


@attrs.frozen
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def exchange(
    url: str,
    method: str,
    target: bytes,
    body: bytes = b"",
    headers: tuple[tuple[str, str], ...] = (),
) -> Reply:
    """One request of raw ``target`` bytes on a connection of its own, its
    answer read whole by h11 (a connection dropped before the answer fails
    the test)."""
    host, port = urlsplit(url).netloc.split(":")
    # Kept alive, as HAProxy's are: the engine relays no request that closes.
    head = [f"{method} ".encode() + target + b" HTTP/1.1", b"host: node"]
    head += [f"{n}: {v}".encode() for n, v in headers]
    if body or method == "POST":
        head.append(f"content-length: {len(body)}".encode())
    reader = h11.Connection(h11.CLIENT)
    reader.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
    reader.send(h11.EndOfMessage())
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(b"\r\n".join(head) + b"\r\n\r\n" + body)
        status, fields, pieces = 0, {}, []
        while True:
            event = reader.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                assert data or status, f"connection dropped without an answer: {target!r}"
                reader.receive_data(data)
            elif isinstance(event, h11.Response):
                status, fields = event.status_code, dict(event.headers.raw_items())
            elif isinstance(event, h11.Data):
                pieces.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return Reply(status, fields, b"".join(pieces))
            else:
                raise AssertionError(f"unexpected {event!r} for {target!r}")


def canonical(conversation: bytes) -> bytes:
    """The id's path segment as a careful client writes it: every byte but
    the unreserved ones percent-encoded."""
    return quote(conversation, safe="").encode()


async def _check(test: Callable[..., None], examples: int) -> None:
    """Run the Hypothesis ``test`` (its examples call back into this run
    with ``trio.from_thread.run``) in a worker thread, ``examples`` of them."""
    configured = settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )(test)
    await trio.to_thread.run_sync(configured)


def _turn_body(text: str) -> bytes:
    return json.dumps({"text": text}).encode()


async def test_a_trailing_slash_is_redirected_to_the_path_as_sent(server: Running) -> None:
    """A path with a trailing ``/`` that a route takes without it is
    redirected (307) to the client's own bytes less the ``/``: the same
    conversation, whatever its id's escapes."""

    @given(segments, st.sampled_from(["/messages/", "/turns/", "/messages//"]))
    @example("a%2541", "/messages/")  # "a%41", not "aA"
    @example("%2F%2Fevil.example", "/messages/")
    def check(segment: str, suffix: str) -> None:
        raw = NATIVE + segment.encode() + suffix.encode()
        method = "POST" if "turns" in suffix else "GET"
        reply = trio.from_thread.run(exchange, server.url, method, raw)
        assert reply.status < 500, (raw, reply)
        if reply.status == 307:
            location = urlsplit(reply.headers[b"location"].decode("ascii"))
            assert not location.netloc or location.netloc == "node", (raw, location)
            assert location.path.encode() == raw.rstrip(b"/"), (raw, location)
            assert not location.query

    await _check(check, 60)
    reply = await exchange(server.url, "POST", b"/a2a/?x=%2F", b"{}")  # any route, its query kept
    assert (reply.status, reply.headers[b"location"]) == (307, b"/a2a?x=%2F"), reply
    reply = await exchange(server.url, "GET", b"/nothing/")
    assert reply.status == 404, reply


async def test_an_id_with_an_encoded_slash_is_refused_and_changes_nothing(
    server: Running,
) -> None:
    """``x%2Fturns`` is the conversation ``x/turns``: the router would read
    ``x`` and run a turn of ``x`` (or read ``a``'s messages for
    ``a%2Fmessages``). Refused: 400, saying why; ``x`` gets no turn."""
    for target in (
        b"/agentik/conversations/x%2Fturns",
        b"/agentik/conversations/x%2fy/turns",
        b"/agentik/conversations/x%2F/turns",
    ):
        reply = await exchange(server.url, "POST", target, _turn_body("hello"))
        assert reply.status == 400, (target, reply)
        assert reply.json()["error"]["code"] == "invalid_path"
        assert "'/'" in reply.json()["error"]["message"]
    reply = await exchange(server.url, "GET", b"/agentik/conversations/x/messages")
    assert reply.status == 404, reply
    # an escaped percent is no slash: the id "x%2F" is served as any other
    reply = await exchange(
        server.url, "POST", b"/agentik/conversations/x%252F/turns", _turn_body("hi")
    )
    assert reply.status == 200, reply
    reply = await exchange(server.url, "GET", b"/agentik/conversations/x%252F/messages")
    assert reply.status == 200, reply


async def test_each_id_is_served_for_the_conversation_haproxy_hashes(server: Running) -> None:
    """A turn under any raw id either runs on the conversation HAProxy hashes
    (the segment percent-decoded once: read back under its canonical
    encoding; an id HAProxy cannot decode, ``%G1``, gets no shard there, and
    runs as sent) or is refused with a 4xx; no other path under it gets a 5xx
    either."""
    sent = 0

    @given(segments, st.one_of(st.just("/turns"), suffixes))
    @example("a%2541", "/turns")
    @example("turns", "/turns")
    @example("messages", "/messages")
    @example("%EF%BC%91", "/turns")
    @example("e%CC%81", "/turns")
    @example("%C3%A9", "/turns")
    @example("A", "/turns")
    def check(segment: str, suffix: str) -> None:
        nonlocal sent
        sent += 1
        raw = NATIVE + segment.encode() + suffix.encode()
        method = "POST" if suffix.endswith(("/turns", "/turns/")) else "GET"
        text = f"turn {sent}"
        body = _turn_body(text) if method == "POST" else b""
        reply = trio.from_thread.run(exchange, server.url, method, raw, body)
        assert reply.status < 500, (raw, reply)
        if method != "POST" or suffix != "/turns" or reply.status != 200:
            assert reply.status in {200, 307, *REFUSALS}, (raw, reply)
            return
        conversation = url_text(raw).split("/")[3].encode()
        hashed = haproxy_segment(raw)
        # None: HAProxy's url_dec refuses a bare '%' ("%G1"), which the node
        # takes as it is; HAProxy keeps no shard for it, the hash picks a node.
        assert hashed in {None, conversation}, raw
        read = trio.from_thread.run(
            exchange, server.url, "GET", NATIVE + canonical(conversation) + b"/messages"
        )
        assert read.status == 200, (raw, read)
        texts = [m["content"] for m in read.json()["messages"] if m["role"] == "user"]
        assert text in texts, (raw, conversation, texts)

    await _check(check, 200)
    long = NATIVE + b"x" * 20_000 + b"/turns"  # past the head's bound
    reply = await exchange(server.url, "POST", long, _turn_body("t"))
    assert reply.status == 431, reply


async def test_an_id_of_raw_bytes_past_ascii_is_refused(server: Running) -> None:
    """An id sent as raw bytes past ASCII (UTF-8 or not), not percent-encoded:
    400 from the engine (HTTP allows only ASCII in a target), an answer, not
    a dropped connection."""

    @given(
        st.binary(max_size=6),
        st.binary(min_size=1, max_size=4).map(lambda b: bytes(x | 0x80 for x in b)),
        st.sampled_from([b"/turns", b"/messages", b""]),
    )
    @example(b"", "é".encode(), b"/turns")
    @example(b"", "\u0661".encode(), b"/turns")  # an Arabic-Indic digit one
    def check(before: bytes, past_ascii: bytes, suffix: bytes) -> None:
        plain = bytes(b for b in before if 0x21 <= b < 0x7F and b not in b"/?#%")
        raw = NATIVE + plain + past_ascii + suffix
        method = "POST" if suffix == b"/turns" else "GET"
        reply = trio.from_thread.run(exchange, server.url, method, raw, _turn_body("x"))
        assert reply.status == 400, (raw, reply)

    await _check(check, 40)


HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
)
_SHARD_ECHO = """\
defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s
frontend echo
    bind 127.0.0.1:{port}
    http-request set-var(txn.shard) {expression} if {{ path_beg /agentik/conversations/ }}
    http-request return status 200 content-type text/plain lf-string "%[var(txn.shard)]" \
if {{ var(txn.shard) -m found }}
    http-request return status 200 content-type text/plain string "none"
"""


def _shard_expression() -> str:
    """The shard expression of deploy/haproxy.cfg, as shipped."""
    from tests.cluster import CONFIG

    for line in CONFIG.read_text().splitlines():
        if "set-var(txn.shard)" in line:
            return line.split("set-var(txn.shard) ", 1)[1].split(" if ", 1)[0]
    raise AssertionError("deploy/haproxy.cfg sets no txn.shard")


async def test_haproxy_computes_the_shard_as_the_emulation_does(tmp_path: Path) -> None:
    """deploy/haproxy.cfg's own shard expression, in a HAProxy that answers
    with the shard it computed, agrees with ``odd_ids.haproxy_shard`` on
    every path (none where url_dec fails)."""
    if HAPROXY is None:
        missing_kit("haproxy", "haproxy is not installed (apt-get install haproxy; .ci/run does)")
    port = free_port()
    config = tmp_path / "echo.cfg"
    config.write_text(_SHARD_ECHO.format(port=port, expression=_shard_expression()))
    checked = await trio.run_process(
        [HAPROXY, "-c", "-f", str(config)], capture_stdout=True, capture_stderr=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    url = f"http://127.0.0.1:{port}"
    async with trio.open_nursery() as nursery:
        process = await trio.lowlevel.open_process(
            [HAPROXY, "-db", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        nursery.start_soon(_reap, process)
        try:
            with trio.fail_after(10):
                while True:
                    try:
                        await exchange(url, "GET", b"/")
                        break
                    except OSError:
                        await trio.sleep(0.05)

            @given(segments, suffixes)
            @example("a+b", "")
            @example("%G1", "/turns")
            @example("%00ab", "")
            @example("", "")
            def check(segment: str, suffix: str) -> None:
                raw = NATIVE + segment.encode() + suffix.encode()
                reply = trio.from_thread.run(exchange, url, "GET", raw)
                assert reply.status == 200, (raw, reply)
                expected = haproxy_shard(raw)
                assert reply.body == (b"none" if expected is None else b"%d" % expected), raw

            await _check(check, 200)
        finally:
            process.kill()
            await process.wait()
            nursery.cancel_scope.cancel()


async def _reap(process: trio.Process) -> None:
    try:
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()


CLUSTER_IDS = st.one_of(
    segments.filter(lambda s: 0 < len(s) <= 60),
    st.sampled_from(["a%2541", "%C3%A9", "e%CC%81", "%EF%BC%91", "turns", "a+b", "%2B", "%25"]),
)


async def test_a_forwarded_request_reaches_the_holder_as_sent(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two nodes: each odd id's turn is sent to the node that does not hold
    its shard (forwarded), its messages read from both; the non-holder's
    answers are the holder's (status and body), the turn is stored under the
    id HAProxy hashes (the path reached the holder as sent), and the holder
    names itself on a path HAProxy hashes to that very shard, and only then."""
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0)
    sent = 0
    ran: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=2.0, cwd=tmp_path)
            for _ in range(2)
        ]
        try:
            await shards_spread(database, 2)
            urls = {n.url for n in nodes}

            async def one(segment: str) -> None:
                nonlocal sent
                sent += 1
                raw = NATIVE + segment.encode()
                hashed = haproxy_segment(raw)
                try:  # the id the node's router reads
                    conversation: str | None = url_text(raw).split("/")[3]
                except UnicodeDecodeError:
                    conversation = None  # the guard's 400
                holder = (
                    await owner_url(database, conversation)
                    if conversation and len(conversation) <= 200
                    else nodes[0].url
                )
                (other,) = urls - {holder}
                # Twice: the first closing its connection, which the engine does
                # not relay (the app's forward, ``Forwarder``), the second relayed
                # by the engine (``_early``).
                texts = [f"t{sent}.{n} {segment}" for n in (1, 2)]
                for text, fields in zip(texts, [(("connection", "close"),), ()], strict=True):
                    forwarded = await exchange(
                        other, "POST", raw + b"/turns", _turn_body(text), fields
                    )
                    assert forwarded.status < 500, (raw, forwarded)
                    if forwarded.status != 200:
                        assert forwarded.status in REFUSALS, (raw, forwarded)
                        direct = await exchange(holder, "POST", raw + b"/turns", _turn_body(text))
                        assert (direct.status, direct.body) == (forwarded.status, forwarded.body)
                        return
                    assert forwarded.json()["text"] == f"answer to {text}"
                    assert forwarded.headers.get(b"agentik-holder") == holder.encode(), raw
                assert conversation is not None
                ran.append((conversation, holder))
                if hashed is not None:  # else HAProxy keeps no shard: the hash picks
                    assert hashed == conversation.encode(), raw
                    assert shard_of(conversation, 256) == haproxy_shard(raw)
                there = await exchange(holder, "GET", raw + b"/messages")
                here = await exchange(other, "GET", raw + b"/messages")
                assert there.status == 200, (raw, there)
                assert (here.status, here.body) == (there.status, there.body), raw
                assert there.headers.get(b"agentik-holder") == holder.encode()
                assert here.headers.get(b"agentik-holder") in {None, holder.encode()}
                stored = [m["content"] for m in there.json()["messages"] if m["role"] == "user"]
                assert [t for t in stored if t in texts] == texts, (raw, stored)
                read = await exchange(
                    holder, "GET", NATIVE + canonical(conversation.encode()) + b"/messages"
                )
                assert read.body == there.body, raw

            @given(CLUSTER_IDS)
            @example("a%2541")  # "a%41", not "aA"
            @example("%C3%A9")
            @example("e%CC%81")
            @example("x%2Fturns")
            @example("%FF")
            @example("%20")
            def check(segment: str) -> None:
                trio.from_thread.run(one, segment)

            with trio.fail_after(25):
                await _check(check, 25)
                # An escaped '%' decoded once too often names another id: one
                # held by the same node, so that a wrong path would be served
                # there rather than sent back (307) and forwarded again.
                for n in range(0x41, 0x5B):
                    if await owner_url(database, f"k%{n:02X}") == await owner_url(
                        database, f"k{n:c}"
                    ):
                        await one(f"k%25{n:02X}")
                        break
                else:
                    raise AssertionError("no k%XX shares a holder with its kX")
            assert len(ran) >= 5, ran
            with trio.fail_after(5):  # each ran on its holder, not where it was sent
                while _where_ran(nodes, ran) != [h for _, h in ran]:  # noqa: ASYNC110 (their logs)
                    await trio.sleep(0.05)
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()


def _where_ran(nodes: list[Node], ran: list[tuple[str, str]]) -> list[str | None]:
    """For each conversation that ran a turn, the one node that logged it
    finished (None while not exactly one has)."""
    where: list[str | None] = []
    for conversation, _ in ran:
        line = f" conversation={conversation} outcome=finished"
        logged = [n.url for n in nodes if any(line in entry for entry in n.log)]
        where.append(logged[0] if len(logged) == 1 else None)
    return where


THROUGH_HAPROXY = ["a%2541", "%C3%A9", "e%CC%81", "%EF%BC%91", "turns", "a+b", "%2B", "A", "a"]
"""Ids HAProxy hashes as the node does (two differ only by case, two by NFC/NFD)."""
UNHASHED = ["50%off", "%G1"]
"""Ids the node takes as sent, whose '%' HAProxy's url_dec refuses: no shard there."""


async def test_through_haproxy_odd_ids_reach_their_holder_after_one_hop(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The shipped HAProxy configuration (round robin instead of the hash, so
    that first turns land on the wrong node) in front of two nodes: every turn
    of an odd id is answered right; HAProxy learns the holder from the first
    answer, so the turns after it take no hop; an id HAProxy cannot decode
    gets no shard there, and its turns are still answered right (a hop at
    worst)."""
    from tests.cluster import start_haproxy

    if HAPROXY is None:
        missing_kit("haproxy", "haproxy is not installed (apt-get install haproxy; .ci/run does)")
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=2.0, cwd=tmp_path)
            for _ in range(2)
        ]
        balancer = None
        try:
            await shards_spread(database, 2)
            balancer, url = await start_haproxy(
                nursery, [n.url for n in nodes], tmp_path, balance="roundrobin"
            )
            for segment in THROUGH_HAPROXY + UNHASHED:
                raw = NATIVE + segment.encode()
                texts = [f"h{n} {segment}" for n in range(3)]
                for text in texts:
                    reply = await exchange(url, "POST", raw + b"/turns", _turn_body(text))
                    assert reply.status == 200, (raw, reply)
                    assert reply.json()["text"] == f"answer to {text}", raw
                    assert b"agentik-holder" not in reply.headers  # HAProxy's, taken off
                read = await exchange(url, "GET", raw + b"/messages")
                stored = [m["content"] for m in read.json()["messages"] if m["role"] == "user"]
                assert stored == texts, (raw, stored)
            ids = [url_text(NATIVE + s.encode()).split("/")[3] for s in THROUGH_HAPROXY]
            with trio.fail_after(5):  # the nodes' logs catch up: each turn ran once
                while any(_turn_lines(nodes, i)[1] != 3 for i in ids):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await trio.sleep(0.2)  # a forwarding node logs its request as the answer ends
            hops = {i: _turn_lines(nodes, i)[0] - 3 for i in ids}
            assert all(0 <= n <= 1 for n in hops.values()), hops
            assert any(hops.values()), "round robin sent every first turn right: proved nothing"
        finally:
            if balancer is not None:
                balancer.kill()
                await balancer.wait()
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()


def _turn_lines(nodes: list[Node], conversation: str) -> tuple[int, int]:
    """The turn requests for ``conversation`` the nodes logged (a forwarded
    one on both), and the turns of it they ran."""
    request = f" request method=POST path=/agentik/conversations/{conversation}/turns "
    ran = f" conversation={conversation} outcome=finished "
    lines = [line for node in nodes for line in node.log]
    return sum(request in line for line in lines), sum(ran in line for line in lines)
