"""``_answer_framing.AnswerFraming`` against h11 as the oracle.

- Any answer h11 writes (status, fields, a body by length, chunked or to the
  close, trailers), fed in any split, is read the same: status, fields, the
  byte its body ends at, and the body's bytes passed on as they came.
- Chunked bodies written by hand (extensions, upper-case and zero-padded
  sizes, trailers) end where h11 says.
- Any bytes at all (mutated answers, random ones): whatever this framing
  accepts as a whole answer, h11 reads as one answer ending at the same
  byte, with the same status and fields. So an answer relayed as bytes never
  carries a byte past its end, nor ends early (no desync of either connection).
"""

from __future__ import annotations

import itertools

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.server._answer_framing import (
    CHUNKED,
    LENGTH,
    NONE,
    UNTIL_CLOSE,
    AnswerFraming,
    FramingError,
)

STATUSES = [200, 201, 204, 304, 307, 400, 404, 500, 503]
names = st.from_regex(rb"x-[a-z0-9-]{1,10}", fullmatch=True)
values = st.binary(max_size=20).map(
    lambda v: bytes(b for b in v if 0x21 <= b <= 0x7E or b >= 0x80) or b"v"
)


def _oracle(method: bytes, data: bytes, *, closed: bool) -> tuple[h11.Response, bytes, int] | None:
    """h11's reading of ``data`` as the answer to a ``method`` request: the
    response, its body, and where it ends; None if h11 refuses it or finds
    no whole answer."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target=b"/", headers=[(b"host", b"x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    if closed:
        client.receive_data(b"")
    response = None
    body = b""
    try:
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return None
            if isinstance(event, h11.InformationalResponse):
                return None
            if isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return response, body, len(data) - len(client.trailing_data[0])
    except h11.RemoteProtocolError:
        return None


def _framed(
    data: bytes, cuts: list[int], *, head_only: bool, closed: bool
) -> tuple[AnswerFraming, bytes, int] | None:
    """This framing's reading, ``data`` fed in pieces cut at ``cuts``: the
    framing, the body bytes it passed on, and how many bytes of ``data`` it
    took before the answer was whole; None if it refused or wants more."""
    framing = AnswerFraming(head_only=head_only)
    passed = b""
    taken = 0
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    try:
        for start, end in itertools.pairwise(bounds):
            if framing.done:
                return None  # bytes past its end: refused below, as the relay does
            passed += framing.feed(data[start:end])
            taken = end
        if closed and not framing.done:
            passed += framing.feed(b"")
    except FramingError:
        return None
    if not framing.done:
        return None
    return framing, passed, taken


def _fields(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Fields as h11 gives them: names as sent, a coding's value lower-cased."""
    return [(n, v.lower() if n.lower() == b"transfer-encoding" else v) for n, v in fields]


def _dechunk(raw: bytes) -> bytes:
    out = b""
    at = 0
    while True:
        end = raw.index(b"\r\n", at)
        size = int(raw[at:end].split(b";")[0].strip(b" \t"), 16)
        if not size:
            return out
        out += raw[end + 2 : end + 2 + size]
        at = end + 2 + size + 2


@settings(max_examples=400, deadline=None)
@given(
    status=st.sampled_from(STATUSES),
    fields=st.lists(st.tuples(names, values), max_size=4),
    body=st.lists(st.binary(min_size=1, max_size=40), max_size=5),
    framing=st.sampled_from(["length", "chunked", "close"]),
    trailers=st.lists(st.tuples(names, values), max_size=2),
    head_only=st.booleans(),
    cuts=st.lists(st.integers(0, 600), max_size=8),
)
def test_any_answer_h11_writes_is_read_as_h11_reads_it(
    status: int,
    fields: list[tuple[bytes, bytes]],
    body: list[bytes],
    framing: str,
    trailers: list[tuple[bytes, bytes]],
    head_only: bool,
    cuts: list[int],
) -> None:
    method = b"HEAD" if head_only else b"GET"
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"%s / HTTP/1.1\r\nhost: x\r\n\r\n" % method)
    server.next_event()
    server.next_event()
    headers = list(fields)
    if framing == "length":
        headers.append((b"content-length", str(sum(map(len, body))).encode()))
    elif framing == "close":
        headers.append((b"connection", b"close"))
    data = server.send(h11.Response(status_code=status, headers=headers)) or b""
    no_body = head_only or status in (204, 304)
    if not no_body:
        for piece in body:
            data += server.send(h11.Data(data=piece)) or b""
    end_headers = trailers if framing == "chunked" and not no_body else []
    data += server.send(h11.EndOfMessage(headers=end_headers)) or b""
    chunked = b"transfer-encoding: chunked" in data.split(b"\r\n\r\n", 1)[0].lower()
    closed = not no_body and framing == "close" and not chunked
    expected = _oracle(method, data, closed=closed)
    assert expected is not None
    response, expected_body, end = expected
    got = _framed(data, cuts, head_only=head_only, closed=closed)
    assert got is not None, data
    framed, passed, taken = got
    head = framed.head
    assert head is not None
    assert taken == end == len(data)
    assert head.status == response.status_code
    assert _fields(head.fields) == list(response.headers.raw_items())
    if head.framing == CHUNKED:
        assert _dechunk(passed) == expected_body
    else:
        assert passed == expected_body
    expected_framing = (
        NONE if no_body else CHUNKED if chunked else LENGTH if framing == "length" else UNTIL_CLOSE
    )
    assert head.framing == expected_framing
    assert head.close == (closed or framing == "close")


chunk_sizes = st.lists(st.integers(1, 50), max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    sizes=chunk_sizes,
    upper=st.booleans(),
    zeros=st.integers(0, 3),
    extension=st.sampled_from([b"", b";a=1", b";name", b';q="x y"', b"; x"]),
    spaces=st.sampled_from([b"", b" ", b"\t "]),
    trailers=st.lists(st.tuples(names, values), max_size=2),
    cuts=st.lists(st.integers(0, 400), max_size=10),
)
def test_hand_written_chunked_bodies_end_where_h11_says(
    sizes: list[int],
    upper: bool,
    zeros: int,
    extension: bytes,
    spaces: bytes,
    trailers: list[tuple[bytes, bytes]],
    cuts: list[int],
) -> None:
    body = b""
    for index, size in enumerate(sizes):
        digits = b"%x" % size
        if upper:
            digits = digits.upper()
        body += b"0" * zeros + digits + extension + spaces + b"\r\n"
        body += bytes([0x61 + index % 26]) * size + b"\r\n"
    body += b"0" * (zeros + 1) + extension + b"\r\n"
    body += b"".join(n + b": " + v + b"\r\n" for n, v in trailers) + b"\r\n"
    data = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body
    expected = _oracle(b"GET", data, closed=False)
    assert expected is not None
    got = _framed(data, cuts, head_only=False, closed=False)
    assert got is not None
    _, passed, taken = got
    assert taken == expected[2] == len(data)
    assert passed == body
    assert _dechunk(passed) == expected[1]


def _answer(draw: st.DrawFn) -> bytes:
    status = draw(st.sampled_from([b"200", b"204", b"304", b"404", b"100", b"2x0"]))
    lines = [draw(st.sampled_from([b"HTTP/1.1 ", b"HTTP/1.0 ", b"HTTP/2 "])) + status + b" OK"]
    length = draw(st.integers(0, 12))
    framing = draw(
        st.lists(
            st.sampled_from(
                [
                    b"content-length: %d" % length,
                    b"Content-Length: %d" % (length + 1),
                    b"content-length: %d, %d" % (length, length),
                    b"content-length: -1",
                    b"content-length: +5",
                    b"transfer-encoding: chunked",
                    b"Transfer-Encoding: CHUNKED",
                    b"transfer-encoding: gzip, chunked",
                    b"transfer-encoding: identity",
                    b"connection: close",
                    b" folded",
                    b"x-a: b",
                    b"x-bad : c",
                ]
            ),
            max_size=3,
        )
    )
    lines += framing
    body = draw(
        st.sampled_from(
            [
                b"",
                b"x" * length,
                b"x" * (length + 1),
                b"5\r\nhello\r\n0\r\n\r\n",
                b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
                b"5;e=1\r\nhello\r\n0\r\nx-t: 1\r\n\r\n",
                b"5\nhello\n0\n\n",
                b"fffffffffffffffff\r\n",
                b"5\r\nhellox\r\n0\r\n\r\n",
            ]
        )
    )
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@settings(max_examples=800, deadline=None)
@given(
    data=st.one_of(
        st.composite(_answer)(),
        st.composite(_answer)().flatmap(
            lambda a: st.tuples(st.integers(0, len(a)), st.binary(max_size=3)).map(
                lambda m, a=a: a[: m[0]] + m[1] + a[m[0] + len(m[1]) :]
            )
        ),
        st.binary(max_size=80).map(lambda b: b"HTTP/1.1 200 OK\r\n" + b),
    ),
    head_only=st.booleans(),
    closed=st.booleans(),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_whatever_this_framing_accepts_h11_reads_alike(
    data: bytes, head_only: bool, closed: bool, cuts: list[int]
) -> None:
    got = _framed(data, cuts, head_only=head_only, closed=closed)
    if got is None:
        return  # refused, or not whole: the relay passes nothing past it
    framed, passed, taken = got
    expected = _oracle(b"HEAD" if head_only else b"GET", data, closed=closed)
    assert expected is not None, f"accepted what h11 refuses: {data!r}"
    response, body, end = expected
    assert framed.head is not None
    assert taken == end, data
    assert framed.head.status == response.status_code
    assert _fields(framed.head.fields) == list(response.headers.raw_items())
    if framed.head.framing == CHUNKED:
        assert _dechunk(passed) == body
    else:
        assert passed == body


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\nX",
        b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
    ],
)
def test_framings_this_relay_does_not_take_are_refused(data: bytes) -> None:
    """Conflicting or repeated lengths, codings other than chunked, an
    informational answer, bytes past the end, bare LF line ends."""

    def read() -> None:
        framing = AnswerFraming()
        framing.feed(data)
        if not framing.done:
            framing.feed(b"")

    with pytest.raises(FramingError):
        read()


def test_a_head_without_end_is_refused_past_its_bound() -> None:
    framing = AnswerFraming()
    framing.feed(b"HTTP/1.1 200 OK\r\n")
    for _ in range(1000):  # 65 bytes a field: 65,000 bytes
        framing.feed(b"x-a: " + b"b" * 58 + b"\r\n")
    with pytest.raises(FramingError, match="head exceeds"):
        framing.feed(b"x-a: " + b"b" * 1000 + b"\r\n")


def test_an_endless_chunk_size_line_is_refused_past_its_bound() -> None:
    framing = AnswerFraming()
    framing.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    for _ in range(39):  # 4,056 bytes
        framing.feed(b"1;" + b"e" * 102)
    with pytest.raises(FramingError, match="line exceeds"):
        framing.feed(b"e" * 100)
