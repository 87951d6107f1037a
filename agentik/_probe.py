"""Is there an agentik server at this URL that takes this token? Asked once,
before a client (``agentik chat --url``, ``agentik bench --url``) starts, so a
dead address or a refused token is one clear error at start instead of a
failure at the first message, or a count of failed turns."""

from __future__ import annotations

import httpx2

from agentik._errors import AgentikError

PROBE_TIMEOUT = 10.0
"""Seconds the check may take (an address that drops packets must not hang)."""


class ServerCheckError(AgentikError):
    """The server at the URL cannot be used; the message says why (unreachable,
    401 unauthorized, not an agentik server)."""


def refused_token(url: str) -> ServerCheckError:
    return ServerCheckError(
        f"{url} answered 401 unauthorized: pass the server's token with --token"
        " or AGENTIK_AUTH_TOKEN"
    )


async def check_server(client: httpx2.AsyncClient, url: str) -> None:
    """One authenticated read (``GET /agentik/conversations?limit=1``) through
    ``client``, which carries the token; raise ``ServerCheckError`` unless it
    answers 200."""
    try:
        response = await client.get(
            "/agentik/conversations", params={"limit": 1}, timeout=PROBE_TIMEOUT
        )
    except httpx2.HTTPError as error:
        raise ServerCheckError(f"cannot reach {url}: {error}") from error
    if response.status_code == 401:
        raise refused_token(url)
    if response.status_code != 200:
        raise ServerCheckError(
            f"{url} does not look like an agentik server:"
            f" GET /agentik/conversations answered HTTP {response.status_code}"
        )
