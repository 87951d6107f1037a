"""A JSON answer, in a leaf module so the route modules and the app that
mounts them import it without importing each other."""

from __future__ import annotations

from starlette.responses import Response

from agentik._json import JsonObject
from agentik.server._sse import dumps


def json_response(
    data: JsonObject, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(dumps(data), status, headers=headers, media_type="application/json")
