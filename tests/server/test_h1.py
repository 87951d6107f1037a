"""``agentik.server.http._h1``, the request parser on llhttp, held to h11 as the oracle.

h11 parsed agentik's requests before llhttp did, and it is the reference
implementation of RFC 9112 in Python. The properties:

- every well-formed request stream (pipelined requests, fixed-length and
  chunked bodies, HTTP/1.0 and 1.1, ``Connection: close``, ``Expect:
  100-continue``, headers with odd case and whitespace) split at any points
  gives the same requests, bodies, keep-alive and 100-continue as h11 gives;
- on any bytes at all (mangled requests, random bytes), as far as both read
  requests whole they read the same ones: the two never disagree on where a
  request ends (no request smuggling between agentik and a proxy that
  parses like h11), though either may refuse what the other reads;
- a request head past ``max_head_bytes`` gets 431, whatever the reads.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.server.http._h1 import (
    BODY,
    CHUNK_FRAMING,
    END,
    ERROR,
    HEAD,
    MAX_HEADERS,
    RequestHead,
    RequestParser,
)

TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VALUE_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E)

names = st.text(TOKEN_CHARS, min_size=1, max_size=12).filter(
    lambda name: (
        name.lower()
        not in {"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade"}
    )
)
values = st.builds(
    lambda a, b, pad_left, pad_right: pad_left + (a + " " + b if b else a) + pad_right,
    st.text(VALUE_CHARS, min_size=1, max_size=20),
    st.text(VALUE_CHARS, max_size=10),
    st.sampled_from(["", " ", "  ", "\t"]),
    st.sampled_from(["", " ", "\t "]),
)
targets = st.builds(
    lambda path, query: "/" + path + ("?" + query if query else ""),
    st.text("abcxyz019-._~%/", max_size=20),
    st.text("a=b&c%20d", max_size=12),
)


@st.composite
def requests(draw: Any) -> tuple[bytes, dict[str, Any]]:
    """One well-formed request's bytes, and what a parser must read from it."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]))
    target = draw(targets)
    version = draw(st.sampled_from(["1.1", "1.1", "1.1", "1.0"]))
    headers = draw(st.lists(st.tuples(names, values), max_size=6))
    body = draw(st.binary(max_size=300)) if method in ("POST", "PUT", "PATCH") else b""
    chunked = version == "1.1" and bool(body) and draw(st.booleans())
    lines = [f"{method} {target} HTTP/{version}"]
    host_at = draw(st.integers(0, len(headers)))
    for i, (name, value) in enumerate(headers):
        if i == host_at:
            lines.append("Host: example")
        lines.append(f"{name}: {value}")
    if host_at == len(headers):
        lines.append(draw(st.sampled_from(["Host: example", "HOST:example", "host:  x "])))
    close = draw(st.sampled_from(["", "close", "keep-alive", "Keep-Alive, Close"]))
    if close:
        lines.append(f"Connection: {close}")
    expect = version == "1.1" and bool(body) and draw(st.booleans())
    if expect:
        lines.append("Expect: 100-continue")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        cuts = sorted(draw(st.lists(st.integers(1, len(body)), max_size=4, unique=True)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"
    else:
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        framed = body
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + framed
    return data, {"method": method, "target": target.encode(), "body": body}


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    return [piece for piece in pieces if piece]  # to h11, b"" is the end of the stream


def read_ours(pieces: list[bytes], max_head_bytes: int = 16 * 1024) -> list[Any]:
    """The requests RequestParser reads: (method, target, version, headers,
    keep_alive, expect_continue, body), then ("error", status) if it refused."""
    parser = RequestParser(max_head_bytes)
    found: list[Any] = []
    head: RequestHead | None = None
    body = b""
    for piece in pieces:
        parser.feed(piece)
        while parser.events:
            kind, value = parser.events.popleft()
            if kind == HEAD:
                assert head is None, "a head inside a request"
                assert isinstance(value, RequestHead)
                head, body = value, b""
            elif kind == BODY:
                assert head is not None and isinstance(value, bytes) and value
                body += value
            elif kind == END:
                assert head is not None
                found.append(
                    (
                        head.method,
                        head.target,
                        head.http_version,
                        head.headers,
                        head.keep_alive,
                        head.expect_continue,
                        body,
                    )
                )
                head = None
            else:
                assert kind == ERROR and not parser.events
                found.append(("error", value))
                return found
    return found


def read_h11(pieces: list[bytes]) -> list[Any]:
    """The same, read by h11 (answering each request with an empty 200)."""
    conn = h11.Connection(h11.SERVER)
    found: list[Any] = []
    request: h11.Request | None = None
    expect = False
    body = b""
    for piece in [*pieces, b""]:
        conn.receive_data(piece)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as error:
                found.append(("error", error.error_status_hint))
                return found
            if event is h11.NEED_DATA or event is h11.PAUSED:
                break
            if isinstance(event, h11.Request):
                request, body = event, b""
                expect = conn.they_are_waiting_for_100_continue
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                keep_alive = conn.our_state is h11.DONE
                found.append(
                    (
                        request.method.decode(),
                        request.target,
                        request.http_version.decode(),
                        list(request.headers),
                        keep_alive,
                        expect,
                        body,
                    )
                )
                if not keep_alive:
                    return found
                conn.start_next_cycle()
            else:  # ConnectionClosed
                return found
    return found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(requests(), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 3000), max_size=8),
)
def test_well_formed_requests_read_as_h11_reads_them(
    stream: list[tuple[bytes, dict[str, Any]]], cuts: list[int]
) -> None:
    data = b"".join(request for request, _ in stream)
    ours = read_ours(split(data, cuts))
    assert ours == read_h11(split(data, cuts))
    expected = []
    for _, wanted in stream:
        expected.append((wanted["method"], wanted["target"], wanted["body"]))
    assert [(r[0], r[1], r[6]) for r in ours] == expected[: len(ours)]
    assert len(ours) == len(expected) or not ours[-1][4]  # all, unless one closed


def assert_no_disagreement(ours: list[Any], theirs: list[Any]) -> None:
    """As far as both read requests whole, they read the same ones. Where one
    refuses, the other may read on (llhttp skips stray line breaks before a
    request, h11 refuses them; llhttp knows no methods beyond the registered
    ones, h11 takes any token): what neither could do is end a request at a
    different byte, which is how requests are smuggled past a proxy."""
    ours_whole = [request for request in ours if request[0] != "error"]
    theirs_whole = [request for request in theirs if request[0] != "error"]
    both = min(len(ours_whole), len(theirs_whole))
    assert ours_whole[:both] == theirs_whole[:both], (ours, theirs)


VALID = (
    b"POST /echo?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
    b"PUT /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
)


@settings(max_examples=1000, deadline=None)
@given(
    at=st.lists(st.integers(0, len(VALID)), min_size=1, max_size=3),
    cut=st.integers(0, 6),
    noise=st.binary(max_size=8)
    | st.sampled_from(
        [b"\r\n", b"\n", b"\r", b"\x00", b":", b" ", b"\t", b"\xff", b"0", b"-", b"G", b";x"]
    ),
    reads=st.lists(st.integers(0, len(VALID) + 8), max_size=4),
)
def test_on_any_bytes_a_request_read_whole_is_the_one_h11_reads(
    at: list[int], cut: int, noise: bytes, reads: list[int]
) -> None:
    data = VALID
    for point in sorted(at, reverse=True):
        data = data[:point] + noise + data[point + cut :]
    ours = read_ours(split(data, reads))
    theirs = read_h11(split(data, reads))
    assert_no_disagreement(ours, theirs)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), reads=st.lists(st.integers(0, 200), max_size=4))
def test_random_bytes_give_events_in_order_or_an_error(data: bytes, reads: list[int]) -> None:
    ours = read_ours(split(data, reads))
    theirs = read_h11(split(data, reads))
    assert_no_disagreement(ours, theirs)
    if ours and ours[-1][0] == "error":
        assert ours[-1][1] in (400, 431, 505)


LIMIT = 1024


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 3 * LIMIT),
    reads=st.lists(st.integers(1, 4 * LIMIT), max_size=5),
    complete=st.booleans(),
)
def test_a_head_past_the_limit_gets_431(size: int, reads: list[int], complete: bool) -> None:
    head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Long: " + b"a" * size
    data = head + b"\r\n\r\n" if complete else head
    found = read_ours(split(data, reads), max_head_bytes=LIMIT)
    if len(data) <= LIMIT - 16:
        assert [request[0] for request in found] == (["GET"] if complete else [])
    elif len(data) > LIMIT + 64:
        assert found == [("error", 431)]


def test_many_small_headers_past_the_limit_get_431() -> None:
    data = b"GET / HTTP/1.1\r\nHost: t\r\n" + b"a: 0123456789\r\n" * 90 + b"\r\n"
    assert read_ours([data], max_head_bytes=LIMIT) == [("error", 431)]
    assert read_ours([data], max_head_bytes=4 * LIMIT)[0][0] == "GET"


@given(reads=st.lists(st.integers(1, 2000), max_size=5))
def test_more_than_max_headers_fields_get_431(reads: list[int]) -> None:
    """Far under the byte bound, but each field costs objects many times its
    bytes: field 101 is refused (``Host`` counts)."""
    fields = b"a:b\r\n" * (MAX_HEADERS - 1)
    ok = b"GET / HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n"
    assert read_ours(split(ok, reads))[0][0] == "GET"
    too_many = b"GET / HTTP/1.1\r\nHost: t\r\n" + fields + b"a:b\r\n\r\n"
    assert read_ours(split(too_many, reads)) == [("error", 431)]


def test_a_long_body_before_a_partial_head_is_not_counted_as_head() -> None:
    """A pipelined request with a body larger than the limit, then the next
    request's head cut short, in one read: not a 431."""
    body = b"b" * (3 * LIMIT)
    first = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    found = read_ours([first + b"GET /next HTTP/1.1\r\nHo"], max_head_bytes=LIMIT)
    assert [request[6] for request in found] == [body]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),  # two
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"GET /HTTP/1.1\r\nHost: a\r\n\r\n", 400),  # no version: not HTTP/0.9 here
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400),  # obs-fold
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        # both framings: which one ends the request is how requests are smuggled;
        # h11 takes Transfer-Encoding, llhttp (stricter, as RFC 9112 §6.3 allows) refuses
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Length: 3\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", 400),
    ],
)
def test_refusals(data: bytes, status: int) -> None:
    assert read_ours([data]) == [("error", status)]


def test_the_rest_after_a_closing_request_is_dropped() -> None:
    data = b"GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGARBAGE\r\n\r\n"
    found = read_ours([data])
    assert [(request[1], request[4]) for request in found] == [(b"/a", False)]


def test_an_upgrade_is_served_as_a_plain_last_request() -> None:
    data = (
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        b"\x81\x85binary frames"
    )
    found = read_ours([data])
    assert [(request[1], request[4]) for request in found] == [(b"/ws", False)]


def test_trailers_are_dropped() -> None:
    data = (
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    [request] = read_ours([data])
    assert request[6] == b"abc"
    assert (b"x-trailer", b"1") not in request[3]


CHUNKED_HEAD = b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
FLOODS = {
    # where the flood starts, the unit repeated, how a short flood ends well
    "trailer-value": (b"3\r\nabc\r\n0\r\nX-Flood: ", b"a", b"\r\n\r\n"),
    "trailer-fields": (b"3\r\nabc\r\n0\r\n", b"a: b\r\n", b"\r\n"),
    "trailer-name": (b"0\r\n", b"a", b": b\r\n\r\n"),
    "chunk-extension": (b"3;x=", b"a", b"\r\nabc\r\n0\r\n\r\n"),
    "size-zeros": (b"", b"0", b"3\r\nabc\r\n0\r\n\r\n"),
    "extension-count": (b"3", b";a=b", b"\r\nabc\r\n0\r\n\r\n"),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    flood=st.sampled_from(sorted(FLOODS)),
    size=st.integers(0, 6 * LIMIT),
    reads=st.lists(st.integers(1, 3 * LIMIT), max_size=6),
)
def test_a_chunked_bodys_framing_is_bounded(flood: str, size: int, reads: list[int]) -> None:
    """Trailers, chunk extensions, zeros before a chunk size: none is body,
    and llhttp (httptools, for trailers) holds or skips them without limit.
    A short run of them is read, never at odds with h11 (which refuses a
    chunk size of more than 20 digits); a long one is refused with 431 (as
    h11 refuses an incomplete event past its bound) by the time the framing
    fed is past ``max_head_bytes`` plus what one read can carry."""
    start, unit, end = FLOODS[flood]
    framing = start + unit * max(1, size // len(unit))
    pieces = split(CHUNKED_HEAD + framing, reads)
    parser = RequestParser(LIMIT)
    fed = refused_at = 0
    for piece in pieces:
        parser.feed(piece)
        fed += len(piece)
        if (ERROR, 431) in parser.events:
            refused_at = fed
            break
    largest = max(map(len, pieces))
    if len(framing) > LIMIT + CHUNK_FRAMING + 2 * largest:
        assert refused_at, "a long run of framing was not refused"
    if refused_at:
        assert refused_at - len(CHUNKED_HEAD) <= LIMIT + CHUNK_FRAMING + 2 * largest
    if len(framing) + len(end) <= LIMIT - 64:  # far under the bound: an ordinary request
        whole = split(CHUNKED_HEAD + framing + end, reads)
        ours = read_ours(whole, max_head_bytes=LIMIT)
        assert_no_disagreement(ours, read_h11(whole))
        assert ours[0][0] == "POST"
        assert ours[0][6] == (b"" if flood == "trailer-name" else b"abc")


@settings(max_examples=100, deadline=None)
@given(chunks=st.integers(1, 5000), reads=st.lists(st.integers(1, 70000), max_size=4))
def test_many_small_chunks_are_one_piece_per_read(chunks: int, reads: list[int]) -> None:
    """A body in 1-byte chunks is read whole (its framing, 5 bytes a chunk, is
    within bounds), and each read gives at most one piece of it: thousands of
    tiny events would hold many times the bytes they carry."""
    data = CHUNKED_HEAD + b"1\r\nx\r\n" * chunks + b"0\r\n\r\n"
    parser = RequestParser(LIMIT)
    body = b""
    for piece in split(data, reads):
        parser.feed(piece)
        kinds = [kind for kind, _ in parser.events]
        assert kinds.count(BODY) <= 1, kinds
        assert ERROR not in kinds
        body += b"".join(value for kind, value in parser.events if kind == BODY)  # type: ignore[misc]
        parser.events.clear()
    assert body == b"x" * chunks


@settings(max_examples=100, deadline=None)
@given(
    chunks=st.integers(0, 3000),
    size=st.integers(1, 16 * LIMIT),
    step=st.integers(1, 2 * LIMIT),
)
def test_trailers_have_the_heads_bound_however_many_chunks(
    chunks: int, size: int, step: int
) -> None:
    """Many small chunks leave much room in the framing's bound; the trailer
    fields (held by httptools until they end) get ``max_head_bytes`` alone."""
    start = CHUNKED_HEAD + b"1\r\nx\r\n" * chunks + b"0\r\n"
    trailer = b"X-Flood: " + b"a" * size
    data = start + trailer
    pieces = [data[i : i + step] for i in range(0, len(data), step)]
    parser = RequestParser(LIMIT)
    fed = 0
    for piece in pieces:
        parser.feed(piece)
        fed += len(piece)
        if (ERROR, 431) in parser.events:
            break
    largest = max(map(len, pieces))
    if size > LIMIT + CHUNK_FRAMING + 2 * largest:
        assert (ERROR, 431) in parser.events
    if (ERROR, 431) in parser.events:
        assert fed - len(start) <= LIMIT + CHUNK_FRAMING + 2 * largest
