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
"""

from __future__ import annotations

import json
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
