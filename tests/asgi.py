"""Pieces of the small ASGI apps the tests serve (model and token backends,
the connection-handler test app)."""

from __future__ import annotations

from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve


async def serve_on_loopback(nursery: trio.Nursery, app: Any) -> str:
    """Serve ``app`` on hypercorn's trio worker on a free 127.0.0.1 port, with
    no access or error log; return its base URL (``http://127.0.0.1:PORT``)."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    binds: list[str] = await nursery.start(serve, app, config)
    return binds[0]


async def answer_lifespan(receive: Any, send: Any) -> None:
    """Complete the lifespan startup and shutdown hypercorn sends."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(receive: Any) -> bytes:
    """The whole request body, however many messages it came in."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
