"""A hostile Chat Completions backend on 127.0.0.1 that quotes the request's
headers back, so a test can see whether the API key travels on from there.

Real HTTP (hypercorn's trio worker, port 0). The first path segment picks the
behaviour, so one backend serves every case: ``{base}/<mode>/v1`` is a
``base_url`` for ``OpenAICompatibleModel``.

- ``401``: an OpenAI-style error whose message quotes the Authorization header.
- ``500``: a plain-text page listing every request header (``retry-after-ms: 1``,
  so the model's retries are quick).
- ``garbage``: 200 with an HTML body that starts with the Authorization header.
- ``echo``: a successful answer (JSON or SSE, as asked) whose text lists the headers.
- ``stream-error``: 200 SSE whose only event is an error quoting the header.

``DripBackend`` quotes the key in pieces no single line or body spells.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from tests.asgi import answer_lifespan, read_body, serve_on_loopback

MODES = ("401", "500", "garbage", "echo", "stream-error")


@attrs.define
class EchoBackend:
    base_url: str = ""
    requests: int = 0

    def url(self, mode: str) -> str:
        return f"{self.base_url}/{mode}/v1"

    async def start(self, nursery: trio.Nursery) -> None:
        self.base_url = await serve_on_loopback(nursery, self.app)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        raw = await read_body(receive)
        self.requests += 1
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        auth = headers.get("authorization", "(none)")
        dump = "; ".join(f"{k}: {v}" for k, v in headers.items())
        mode = scope["path"].split("/")[1]
        streaming = json.loads(raw).get("stream") is True
        if mode == "401":
            error = {"message": f"Incorrect API key provided: {auth}", "type": "auth_error"}
            await _send(send, 401, "application/json", json.dumps({"error": error}))
        elif mode == "500":
            await _send(send, 500, "text/plain", f"upstream failed; you sent {dump}", retry=True)
        elif mode == "garbage":
            await _send(send, 200, "text/html", f"{auth} <html>not json</html>")
        elif mode == "echo" and not streaming:
            await _send(send, 200, "application/json", json.dumps(_completion(dump)))
        elif mode == "echo":
            await _sse(send, [_chunk(dump), _chunk(None, finish="stop")])
        else:
            await _sse(send, [{"error": {"message": f"stream broke for {auth}"}}])


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"your headers: {text}"},
                "finish_reason": "stop",
            }
        ],
    }


def _chunk(text: str | None, *, finish: str | None = None) -> dict[str, Any]:
    delta = {} if text is None else {"content": f"your headers: {text}"}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def _send(send: Any, status: int, kind: str, body: str, *, retry: bool = False) -> None:
    headers = [(b"content-type", kind.encode())]
    if retry:
        headers.append((b"retry-after-ms", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body.encode()})


async def _sse(send: Any, events: list[dict[str, Any]]) -> None:
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    await send({"type": "http.response.body", "body": body.encode()})


@attrs.define
class DripBackend:
    """A Chat Completions backend on 127.0.0.1 that quotes the request's
    Authorization header (``Bearer <key>``) and the key alone in its answer
    (UTF-8, non-ASCII sent raw), and streams that answer in pieces so small
    that no piece holds the key.

    - ``sizes``: the lengths of the content (and tool-argument) pieces, cycled.
    - ``writes``: when set, the SSE body goes out in writes of these many
      bytes (cycled), cutting lines, the key and UTF-8 sequences in two; each
      event's JSON is also split over two ``data:`` lines.
    - ``tool``: the first answer of each turn is a ``clock_now`` call whose
      arguments quote the header, streamed in pieces; the next answer is text.
    - ``escape``: every character of every string is sent as a JSON ``\\u``
      escape, so no byte of the raw body spells the key.

    A non-streaming request gets the same answer whole, as one JSON body.
    """

    base_url: str = ""
    sizes: Sequence[int] = (3, 4)
    writes: Sequence[int] = ()
    tool: bool = False
    escape: bool = False
    requests: int = 0

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1"

    async def start(self, nursery: trio.Nursery) -> None:
        self.base_url = await serve_on_loopback(nursery, self.app)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = json.loads(await read_body(receive))
        self.requests += 1
        auth = dict(scope["headers"]).get(b"authorization", b"(none)").decode()
        key = auth.removeprefix("Bearer ")
        text = f"you sent {auth}; so the key is {key}. clé 🔑 “{key}”"
        call = self.tool and body["messages"][-1]["role"] != "tool"
        arguments = json.dumps({"tz": f"{auth} / {key}"})
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": None if call else text}
            if call:
                function = {"name": "clock_now", "arguments": arguments}
                message["tool_calls"] = [{"id": "call-1", "type": "function", "function": function}]
            choice = {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if call else "stop",
            }
            answer = {**_completion(""), "choices": [choice]}
            await _send(send, 200, "application/json", self._dumps(answer))
            return
        if call:
            first = {
                "index": 0,
                "id": "call-1",
                "type": "function",
                "function": {"name": "clock_now"},
            }
            deltas = [{"tool_calls": [first]}]
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in self._pieces(arguments)
            ]
            finish = "tool_calls"
        else:
            deltas = [{"content": piece} for piece in self._pieces(text)]
            finish = "stop"
        events = [_delta_chunk(delta) for delta in deltas] + [_delta_chunk({}, finish=finish)]
        await self._stream(send, [self._dumps(event) for event in events])

    def _pieces(self, text: str) -> list[str]:
        pieces, start = [], 0
        for size in itertools.cycle(self.sizes):
            if start >= len(text):
                return pieces
            pieces.append(text[start : start + size])
            start += size
        raise AssertionError("unreachable")

    def _dumps(self, value: object) -> str:
        """JSON text; with ``escape``, every string character as a ``\\u`` escape."""
        if not self.escape:
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            units = value.encode("utf-16-be")
            return (
                '"'
                + "".join(
                    f"\\u{int.from_bytes(units[i : i + 2]):04x}" for i in range(0, len(units), 2)
                )
                + '"'
            )
        if isinstance(value, dict):
            items = (f"{self._dumps(k)}:{self._dumps(v)}" for k, v in value.items())
            return "{" + ",".join(items) + "}"
        if isinstance(value, list):
            return "[" + ",".join(self._dumps(v) for v in value) + "]"
        return json.dumps(value)

    async def _stream(self, send: Any, frames: list[str]) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if self.writes:  # each event's JSON over two data: lines, split after its first ','
            frames = [frame.replace(",", ",\ndata: ", 1) for frame in frames]
        raw = "".join(f"data: {frame}\n\n" for frame in [*frames, "[DONE]"]).encode()
        start = 0
        for size in itertools.cycle(self.writes or [len(raw)]):
            if start >= len(raw):
                break
            await send(
                {"type": "http.response.body", "body": raw[start : start + size], "more_body": True}
            )
            start += size
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _delta_chunk(delta: dict[str, Any], *, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
