"""An ASGI wrapper around an MCP HTTP app: records what the client sends, and
can play a server of the current stable version (2025-11-25) or one that
wants a bearer token.

``Recorder`` sits between hypercorn and the SDK's Streamable HTTP app. It
reads each POST body (JSON-RPC), appends ``(method, params)`` to ``calls``
and hands the body on unchanged. With ``legacy=True`` it answers
``server/discover`` the way a 2025-11-25 server answers a request before
``initialize`` (HTTP 400, a JSON-RPC error), so the client must fall back to
the handshake. With ``bearer`` set, a request without
``Authorization: Bearer <bearer>`` gets 401 with a ``WWW-Authenticate``
challenge, as an OAuth-protected MCP server answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from tests.asgi import read_body


@attrs.define
class Recorder:
    app: Any
    legacy: bool = False
    bearer: str | None = None
    status: int = 401
    calls: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.bearer is not None and headers.get(b"authorization") != (
            f"Bearer {self.bearer}".encode()
        ):
            await _reply(
                send,
                self.status,
                b"",
                [(b"www-authenticate", b'Bearer error="invalid_token"')],
            )
            return
        body = await read_body(receive)
        message = json.loads(body) if body else {}
        if isinstance(message, dict) and "method" in message:
            self.calls.append((message["method"], message.get("params") or {}))
            if self.legacy and message["method"] == "server/discover":
                error = {"code": -32600, "message": "Bad Request: Server not initialized"}
                reply = {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
                content = [(b"content-type", b"application/json")]
                await _reply(send, 400, json.dumps(reply).encode(), content)
                return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        await self.app(scope, replay, send)


async def _reply(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def serving(app: Any, bind: str = "127.0.0.1:0") -> AsyncIterator[str]:
    """``app`` on ``bind`` in this test's loop (lifespan included); yields its base URL."""
    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(serve, app, config, shutdown_trigger=trio.sleep_forever)
        )
        yield binds[0]
        nursery.cancel_scope.cancel()
