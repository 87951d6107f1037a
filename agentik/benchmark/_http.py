"""The HTTP client of ``agentik bench --url``: cheap, so the bench measures the server.

A bench client shares the machine with the server it drives; httpx's pool
scanned every connection per request (encode/httpcore#1035), and a
general-purpose client still spends more CPU per request than the server
spends per turn, so the published figures measured the client. This one is
the minimum a closed-loop load needs:

- One keep-alive HTTP/1.1 connection per conversation (a conversation sends
  one turn at a time), opened on first use, per origin, and kept; no pool.
- Requests are a prebuilt head plus the body; responses are parsed by
  llhttp (``httptools``, which the server already uses), so chunked and
  Content-Length framing, keep-alive and ``Connection: close`` are handled by
  a real parser.
- 307/308 redirects are followed (several nodes: a conversation's turns run on
  its owner), at most ``MAX_REDIRECTS`` times.
- A connection reused after being idle that the server closed before
  answering (no byte of a response) is replaced once and the request resent,
  as browsers and httpx do; any other failure is the caller's.
"""

from __future__ import annotations

import ssl
from urllib.parse import urljoin, urlsplit

import attrs
import httptools
import trio

MAX_REDIRECTS = 5
_READ = 65536


@attrs.frozen
class Reply:
    """A response: its status and whole body."""

    status: int
    body: bytes


class _Response:
    """httptools callbacks for one response."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.location: bytes | None = None
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"location":
            self.location = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True
        # llhttp answers for the message just parsed only until it resets
        self.keep_alive = self.parser.should_keep_alive()


@attrs.define
class _Connection:
    stream: trio.abc.Stream
    fresh: bool = True
    """No request has been answered on it yet (so a close cannot be an idle timeout)."""


class BenchClient:
    """One conversation's client: keep-alive connections by origin, one request at a time."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self._base = base_url.rstrip("/")
        self._headers = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._connections: dict[tuple[str, str, int], _Connection] = {}
        self._tls: ssl.SSLContext | None = None

    async def post(self, path: str, body: bytes) -> Reply:
        """POST ``body`` (JSON) to ``path``, following 307/308 redirects."""
        url = f"{self._base}{path}"
        for _ in range(MAX_REDIRECTS + 1):
            status, answer, location = await self._exchange(url, body)
            if status in (307, 308) and location is not None:
                url = urljoin(url, location.decode("latin-1"))
                continue
            return Reply(status, answer)
        raise ConnectionError(f"more than {MAX_REDIRECTS} redirects from {self._base}{path}")

    async def aclose(self) -> None:
        for connection in self._connections.values():
            await connection.stream.aclose()
        self._connections.clear()

    async def _exchange(self, url: str, body: bytes) -> tuple[int, bytes, bytes | None]:
        parts = urlsplit(url)
        https = parts.scheme == "https"
        host = parts.hostname or ""
        origin = (parts.scheme, host, parts.port or (443 if https else 80))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        request = post_request(parts.netloc, target, self._headers, body)
        while True:
            connection = self._connections.get(origin)
            reused = connection is not None and not connection.fresh
            if connection is None:
                connection = _Connection(await self._open(origin))
                self._connections[origin] = connection
            try:
                return await self._send(origin, connection, request)
            except _ClosedUnanswered:
                if not reused:
                    raise ConnectionError(f"{url}: the server closed the connection") from None

    async def _send(
        self, origin: tuple[str, str, int], connection: _Connection, request: bytes
    ) -> tuple[int, bytes, bytes | None]:
        response = _Response()
        parser = response.parser
        got_bytes = False
        try:
            await connection.stream.send_all(request)
            while not response.complete:
                data = await connection.stream.receive_some(_READ)
                if not data:
                    raise (
                        _ClosedUnanswered()
                        if not got_bytes
                        else ConnectionError("the server closed the connection mid-response")
                    )
                got_bytes = True
                parser.feed_data(data)
        except (_ClosedUnanswered, trio.BrokenResourceError) as error:
            await self._drop(origin)
            if not got_bytes:
                raise _ClosedUnanswered() from error
            raise ConnectionError("the connection broke mid-response") from error
        except BaseException:
            await self._drop(origin)
            raise
        connection.fresh = False
        if not response.keep_alive:
            await self._drop(origin)
        return parser.get_status_code(), bytes(response.body), response.location

    async def _drop(self, origin: tuple[str, str, int]) -> None:
        connection = self._connections.pop(origin, None)
        if connection is not None:
            with trio.CancelScope(shield=True):
                await connection.stream.aclose()

    async def _open(self, origin: tuple[str, str, int]) -> trio.abc.Stream:
        scheme, host, port = origin
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            return await trio.open_ssl_over_tcp_stream(host, port, ssl_context=self._tls)
        return await trio.open_tcp_stream(host, port)


def post_request(host: str, target: str, headers: str, body: bytes) -> bytes:
    """A JSON POST as it goes on the wire; ``headers`` are whole header lines.
    Held to h11 by ``tests/benchmark/test_bench_http.py`` (the one piece of
    framing written here: the response side is llhttp's)."""
    return (
        f"POST {target} HTTP/1.1\r\nHost: {host}\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1") + body


class _ClosedUnanswered(Exception):
    """The server closed the connection before any byte of a response."""
