"""The ASGI scope of each request, and the keys agentik's engine adds to it.

Apart from the connection (``_connection``): the scope is what the engine
promises the apps above it (``CANCELS``, ``REFUSED`` are exported by the
door), built from the request's parsed head and the connection's addresses
alone.
"""

from __future__ import annotations

from urllib.parse import unquote

from agentik.server.http._framing import Scope
from agentik.server.http._h1 import RequestHead

CANCELS = "agentik.cancels"
"""Scope key, True in every request of this engine: an app still answering
when its client leaves is cancelled (after ``http.disconnect``), so it need
not watch ``receive`` for the leave itself (``_forward`` does not)."""
REFUSED = "agentik.refused"
"""Scope key: the status the server answered on its own after the app had
the request (a malformed body, a body too slow); the app was cancelled."""

_ASGI = {"version": "3.0", "spec_version": "2.3"}


def request_scope(
    head: RequestHead,
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
    state: dict[str, object] | None,
) -> Scope:
    """The request's ASGI scope (``state``: the lifespan state, copied)."""
    path, _, query = head.target.partition(b"?")
    scope: Scope = {
        "type": "http",
        "asgi": _ASGI,
        "http_version": head.http_version,
        "method": head.method,
        "scheme": "http",
        "path": unquote(path.decode("ascii")),  # llhttp refuses bytes past ASCII
        "raw_path": path,
        "query_string": query,
        "root_path": "",
        "headers": head.headers,
        "client": client,
        "server": server,
        CANCELS: True,
    }
    if state is not None:
        scope["state"] = state.copy()
    return scope
