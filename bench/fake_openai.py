"""A fake OpenAI-compatible Chat Completions server for client benchmarks, in its own process.

    python -m bench.fake_openai [--median 0.5] [--sigma 0.5] [--deltas 8]
                                [--rpm N] [--tpm N] [--burst 1.0]

prints its base URL (``http://127.0.0.1:PORT/v1``) on stdout, then serves
until killed. It is built to cost little, so that a client measured against
it is measured alone: asyncio protocols, no framework, requests parsed by
hand (the clients are well-behaved), one timer per answer.

- ``POST /v1/chat/completions``: answers after ``latency(key)`` seconds, where
  ``key`` is the text of the request's last message: log-normal with the
  given median and sigma (sigma 0.5: mean = 1.13 x median), the same for the
  same text in every run and for every client, so runs compare and the
  benchmark can compute the ideal wall time in advance. The answer is
  ``reply to <key>``; with ``"stream": true`` it is an SSE stream
  (``--deltas`` content chunks, the first after half the latency, the rest
  spread over the other half, then ``finish_reason``, a usage chunk and
  ``[DONE]``), otherwise one JSON completion.
- With ``--rpm`` / ``--tpm`` it keeps a hosted provider's budget: requests
  and tokens per minute, each a continuous token bucket holding ``--burst``
  seconds of its refill (1 s by default: enforced per second, as OpenAI says
  it may enforce a per-minute limit). A request costs the tokens its answer
  reports (prompt and completion). Past a budget it answers 429 with
  ``Retry-After`` (whole seconds until both buckets could take it, at least
  1) and OpenAI's ``x-ratelimit-limit-*``, ``-remaining-*`` and ``-reset-*``
  headers (Go durations), which it also sends with every answer.
- ``GET /stats``: ``{"cpu": process CPU seconds, "calls": answers started,
  "latency": their latencies summed, "connections": connections opened,
  "open": open now, "most_open": most open at once, "most_in_flight": most
  calls waiting at once, "rate_limited": 429s answered, "served_tokens":
  tokens of the answers started}``.
- HTTP/1.1 with keep-alive, and HTTP/2 with prior knowledge (h2c, the ``h2``
  package) on the same port, told apart by the HTTP/2 connection preface.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_NORMAL = NormalDist()


def latency(key: str, median: float = 0.5, sigma: float = 0.5) -> float:
    """Seconds the fake model takes to answer a request whose last message is ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    quantile = (int.from_bytes(digest, "big") + 0.5) / 2**64
    return median * math.exp(sigma * _NORMAL.inv_cdf(quantile))


class Bucket:
    """A budget per minute: a continuous token bucket of ``burst`` seconds' refill."""

    def __init__(self, limit: int, burst: float) -> None:
        self.limit = limit
        self.rate = limit / 60.0
        self.capacity = max(1.0, self.rate * burst)
        self.level = self.capacity
        self.at = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait(self, amount: float) -> float:
        """Seconds until ``amount`` fits (a full bucket, for more than it holds)."""
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def headers(self, kind: str) -> list[tuple[str, str]]:
        reset = (self.capacity - self.level) / self.rate
        return [
            (f"x-ratelimit-limit-{kind}", str(self.limit)),
            (f"x-ratelimit-remaining-{kind}", str(max(0, int(self.level)))),
            (f"x-ratelimit-reset-{kind}", f"{max(0.0, reset):.3f}s"),
        ]


class Budget:
    """A hosted provider's requests and tokens per minute."""

    def __init__(self, rpm: int | None, tpm: int | None, burst: float) -> None:
        self.requests = None if rpm is None else Bucket(rpm, burst)
        self.tokens = None if tpm is None else Bucket(tpm, burst)

    def admit(self, tokens: int) -> tuple[float, list[tuple[str, str]]]:
        """``(0, headers)`` and the cost taken, or ``(seconds to wait, headers)``."""
        now = time.monotonic()
        wait = 0.0
        for bucket, amount in ((self.requests, 1), (self.tokens, tokens)):
            if bucket is not None:
                bucket.refill(now)
                wait = max(wait, bucket.wait(amount))
        if wait == 0.0:
            for bucket, amount in ((self.requests, 1), (self.tokens, tokens)):
                if bucket is not None:
                    bucket.level -= amount
        headers: list[tuple[str, str]] = []
        if self.requests is not None:
            headers += self.requests.headers("requests")
        if self.tokens is not None:
            headers += self.tokens.headers("tokens")
        return wait, headers


class Stats:
    def __init__(self) -> None:
        self.calls = 0
        self.rate_limited = 0
        self.served_tokens = 0
        self.latency = 0.0
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.in_flight = 0
        self.most_in_flight = 0

    def as_json(self) -> bytes:
        return json.dumps(
            {
                "cpu": time.process_time(),
                "calls": self.calls,
                "latency": self.latency,
                "connections": self.connections,
                "open": self.open,
                "most_open": self.most_open,
                "most_in_flight": self.most_in_flight,
                "rate_limited": self.rate_limited,
                "served_tokens": self.served_tokens,
            }
        ).encode()


class Answers:
    """What a call answers and when: shared by both HTTP versions."""

    def __init__(
        self, median: float, sigma: float, deltas: int, stats: Stats, budget: Budget
    ) -> None:
        self.median = median
        self.sigma = sigma
        self.deltas = deltas
        self.stats = stats
        self.budget = budget
        self.loop = asyncio.get_running_loop()

    def start(
        self,
        body: bytes,
        send: Callable[[bytes, bool], None],
        start_stream: Callable[[list[tuple[str, str]]], None],
        refuse: Callable[[int, list[tuple[str, str]], bytes], None],
    ) -> None:
        """Schedule the answer to one request: ``send(data, last)`` writes body bytes;
        ``start_stream(headers)`` writes the head of an SSE response; ``refuse(status,
        headers, body)`` answers an error at once."""
        request = json.loads(body)
        messages = request["messages"]
        key = str(messages[-1].get("content") or "")
        model = request.get("model", "fake")
        text = f"reply to {key}"
        usage = {
            "prompt_tokens": sum(len(str(m.get("content") or "")) for m in messages) // 4,
            "completion_tokens": len(text) // 4,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        stats = self.stats
        wait, headers = self.budget.admit(usage["total_tokens"])
        if wait > 0:
            stats.rate_limited += 1
            headers.append(("retry-after", str(max(1, math.ceil(wait)))))
            refuse(429, headers, _RATE_LIMITED)
            return
        seconds = latency(key, self.median, self.sigma)
        stats.calls += 1
        stats.latency += seconds
        stats.served_tokens += usage["total_tokens"]
        stats.in_flight += 1
        stats.most_in_flight = max(stats.most_in_flight, stats.in_flight)
        if not request.get("stream"):

            def answer() -> None:
                stats.in_flight -= 1
                send(_completion(model, text, usage), True)

            self.loop.call_later(seconds, answer)
            return
        pieces = _split(text, self.deltas)
        events = [
            _chunk(model, {"role": "assistant", "content": pieces[0]}, None),
            *(_chunk(model, {"content": p}, None) for p in pieces[1:]),
            _chunk(model, {}, "stop"),
        ]
        if (request.get("stream_options") or {}).get("include_usage"):
            events.append(_usage_chunk(model, usage))
        events.append(b"data: [DONE]\n\n")
        step = seconds / 2 / max(1, len(pieces))

        def first() -> None:
            start_stream(headers)
            emit(0)

        def emit(i: int) -> None:
            if i < len(pieces) - 1:
                send(events[i], False)
                self.loop.call_later(step, emit, i + 1)
            else:  # the last piece, finish_reason, usage and [DONE] at once
                stats.in_flight -= 1
                send(b"".join(events[i:]), True)

        self.loop.call_later(seconds / 2, first)


_RATE_LIMITED = json.dumps(
    {
        "error": {
            "message": "Rate limit reached: retry after the time in Retry-After.",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    }
).encode()


def _split(text: str, count: int) -> list[str]:
    size = max(1, math.ceil(len(text) / max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _completion(model: str, text: str, usage: dict[str, int]) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        },
        separators=(",", ":"),
    ).encode()


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _usage_chunk(model: str, usage: dict[str, int]) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


class Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 (one request at a time), or HTTP/2 after the preface."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.stats = answers.stats
        self.buffer = bytearray()
        self.busy = False
        self.streaming = False
        self.h2: H2 | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.stats.connections += 1
        self.stats.open += 1
        self.stats.most_open = max(self.stats.most_open, self.stats.open)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stats.open -= 1
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.h2 is not None:
            self.h2.received(data)
            return
        self.buffer += data
        if self.buffer.startswith(PREFACE[: len(self.buffer)]) and len(self.buffer) < len(PREFACE):
            return
        if self.buffer.startswith(PREFACE):
            assert self.transport is not None
            self.h2 = H2(self.transport, self.answers)
            self.h2.received(bytes(self.buffer))
            return
        self.next_request()

    def next_request(self) -> None:
        if self.busy:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1")
        lines = head.split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self.busy = True
        if method == "GET" and target == "/stats":
            self.respond(200, "application/json", self.stats.as_json())
        elif method == "POST" and target.endswith("/chat/completions"):
            self.answers.start(body, self.send_stream, self.start_stream, self.refuse)
        else:
            self.respond(404, "text/plain", b"not found")

    def respond(
        self,
        status: int,
        content_type: str,
        body: bytes,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers or ())
        self.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n{extra}"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.done()

    def refuse(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.respond(status, "application/json", body, headers)

    def start_stream(self, headers: list[tuple[str, str]]) -> None:
        self.streaming = True
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
        self.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + extra.encode()
            + b"transfer-encoding: chunked\r\n\r\n"
        )

    def send_stream(self, data: bytes, last: bool) -> None:
        if not self.streaming:  # a whole JSON answer
            self.respond(200, "application/json", data)
            return
        tail = b"\r\n0\r\n\r\n" if last else b"\r\n"
        self.write(b"%x\r\n" % len(data) + data + tail)
        if last:
            self.streaming = False
            self.done()

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def done(self) -> None:
        self.busy = False
        if self.buffer:
            self.next_request()


class H2:
    """The HTTP/2 side of one connection (``h2``'s state machine, asyncio's transport)."""

    def __init__(self, transport: asyncio.Transport, answers: Answers) -> None:
        import h2.config
        import h2.connection
        import h2.settings

        self.transport = transport
        self.answers = answers
        self.connection = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.connection.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100_000,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24,
            },
        )
        self.connection.initiate_connection()
        self.connection.increment_flow_control_window(1 << 30)
        self.bodies: dict[int, bytearray] = {}
        self.paths: dict[int, str] = {}
        self.pending: dict[int, list[tuple[bytes, bool]]] = {}
        self.flush()

    def received(self, data: bytes) -> None:
        import h2.events

        for event in self.connection.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers or [])
                self.paths[event.stream_id] = str(headers.get(":path", ""))
                self.bodies[event.stream_id] = bytearray()
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data or b""
                self.connection.acknowledge_received_data(
                    event.flow_controlled_length, event.stream_id
                )
            elif isinstance(event, h2.events.StreamEnded):
                self.handle(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream in list(self.pending):
                    self.drain(stream)
        self.flush()

    def handle(self, stream: int) -> None:
        body = bytes(self.bodies.pop(stream))
        path = self.paths.pop(stream)
        if path == "/stats":
            self.head(stream, "application/json")
            self.send(stream, self.answers.stats.as_json(), True)
            return

        started = False

        def start(headers: list[tuple[str, str]]) -> None:
            nonlocal started
            started = True
            self.head(stream, "text/event-stream")

        def send(data: bytes, last: bool) -> None:
            if not started:
                self.head(stream, "application/json")
            self.send(stream, data, last)

        def refuse(status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.head(stream, "application/json", status, headers)
            self.send(stream, body, True)

        self.answers.start(body, send, start, refuse)

    def head(
        self,
        stream: int,
        content_type: str,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self.connection.send_headers(
            stream, [(":status", str(status)), ("content-type", content_type), *(headers or ())]
        )
        self.flush()

    def send(self, stream: int, data: bytes, last: bool) -> None:
        import h2.exceptions

        self.pending.setdefault(stream, []).append((data, last))
        try:
            self.drain(stream)
        except h2.exceptions.StreamClosedError:  # the client reset it: nobody reads
            self.pending.pop(stream, None)
        self.flush()

    def drain(self, stream: int) -> None:
        queue = self.pending.get(stream, [])
        while queue:
            data, last = queue[0]
            room = min(
                self.connection.local_flow_control_window(stream),
                self.connection.max_outbound_frame_size,
            )
            if room < len(data) and data:
                if room <= 0:
                    return
                self.connection.send_data(stream, data[:room])
                queue[0] = (data[room:], last)
                continue
            self.connection.send_data(stream, data, end_stream=last)
            queue.pop(0)
        self.pending.pop(stream, None)

    def flush(self) -> None:
        data = self.connection.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)


async def serve(
    port: int,
    median: float,
    sigma: float,
    deltas: int,
    budget: Budget | None = None,
) -> None:
    stats = Stats()
    answers = Answers(median, sigma, deltas, stats, budget or Budget(None, None, 1.0))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(answers), "127.0.0.1", port, backlog=4096, reuse_address=True
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{bound}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--median", type=float, default=0.5, help="median latency, seconds")
    parser.add_argument("--sigma", type=float, default=0.5, help="log-normal sigma")
    parser.add_argument("--deltas", type=int, default=8, help="content chunks per stream")
    parser.add_argument("--rpm", type=int, default=None, help="requests per minute")
    parser.add_argument("--tpm", type=int, default=None, help="tokens per minute")
    parser.add_argument("--burst", type=float, default=1.0, help="seconds of refill a bucket holds")
    args = parser.parse_args()
    budget = Budget(args.rpm, args.tpm, args.burst)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.median, args.sigma, args.deltas, budget))


if __name__ == "__main__":
    main()
