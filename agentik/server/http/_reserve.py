"""The peers' reserve at a request's head: whether the request goes on.

A connection accepted into the peers' reserve (past ``max_connections``:
``_settings.PeerReserve``) serves one request that carries the peer header,
then closes. A client's request there waits for a regular slot (as it would
have in the listen backlog) and is then served as on any connection, unless
half the reserve waits so already: then it gets ``503`` with
``Retry-After: 1`` and a JSON error body (``AT_CAPACITY``), and the
connection closes; no app sees it. A peer's request on a regular slot while
every regular one is taken moves its connection to the reserve.

Apart from the connection (``_connection``), which asks ``admit`` at each
head when a reserve is configured and writes the 503 itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentik.server.http._accept import Slot
from agentik.server.http._h1 import RequestHead
from agentik.server.http._response import error_body
from agentik.server.http._settings import PeerReserve
from agentik.server.http._sse import dumps
from agentik.server.http._timer import ConnectionTimer

AT_CAPACITY = dumps(
    error_body(
        "at_capacity",
        "the server is at its connection limit ([limits] max_connections); retry",
    )
).encode()
"""The body of the 503 to a client past the bound (``Retry-After: 1``)."""
AT_CAPACITY_HEADERS = b"content-type: application/json\r\nretry-after: 1\r\n"


async def admit(
    head: RequestHead,
    peers: PeerReserve,
    slot: Slot,
    timer: ConnectionTimer,
    turn_away: Callable[[], Awaitable[None]],
) -> bool:
    """Past the bound (``PeerReserve``): whether the request goes on. On a
    reserve connection a peer's request does; a client's waits for a
    regular slot (no deadline meanwhile: its head is in) or is turned
    away (``turn_away``). A peer's request on a regular slot while clients
    hold every other moves its connection to the reserve (it closes once
    answered)."""
    if slot.reserved:
        if any(name == peers.header for name, _ in head.headers):
            return True
        if not timer.stop():
            return False  # due to close: the watcher cuts it
        if await slot.to_regular():
            peers.counts.waited += 1
            return True
        peers.counts.turned_away += 1
        await turn_away()
        return False
    if slot.crowded and any(name == peers.header for name, _ in head.headers) and slot.to_reserve():
        peers.counts.moved += 1
    return True
