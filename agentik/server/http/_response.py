"""JSON answers: a Starlette ``Response``, the same bytes straight to ASGI
``send`` for the hot route, and the one shape of every error body.

A leaf of the engine, so every protocol and the app that mounts them build
their answers alike without importing each other."""

from __future__ import annotations

from starlette.responses import Response

from agentik._json import JsonObject
from agentik.server.http._framing import Send
from agentik.server.http._sse import dumps


def json_response(
    data: JsonObject, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(dumps(data), status, headers=headers, media_type="application/json")


def error_body(code: str, message: str) -> JsonObject:
    """The body of every refusal: ``{"error": {"code", "message"}}``."""
    return {"error": {"code": code, "message": message}}


async def send_json(send: Send, data: JsonObject, status: int = 200) -> None:
    """A JSON response straight to ASGI ``send``: the bytes and headers
    ``json_response`` gives, without building a Starlette ``Response``."""
    body = dumps(data).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", b"application/json"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
