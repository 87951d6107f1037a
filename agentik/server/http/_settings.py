"""How connections are served: the settings ``serve`` takes (``[limits]`` in
agentik.toml), apart from the connection that applies them."""

from __future__ import annotations

import attrs

from agentik.server.http._timer import ConnectionLimits


@attrs.define
class ReserveCounts:
    """What happened at the bound since the server started (``/metrics``)."""

    turned_away: int = 0
    """Clients' requests answered 503 ``at_capacity`` (half the reserve waited)."""
    waited: int = 0
    """Clients' connections that waited in the reserve and got a regular slot."""
    moved: int = 0
    """Peers' connections moved from a regular slot to the reserve."""


@attrs.frozen(kw_only=True)
class PeerReserve:
    """Connections accepted past ``max_connections`` for requests from other
    nodes (``[limits] peer_connections``; docs/scale-out.md).

    Two nodes that forward requests to each other, each at its bound, would
    otherwise wait for ever: every connection of each holds a request
    forwarded to the other, and those wait, never accepted, in the other's
    listen backlog. A peer's request (one carrying ``header``, the cluster's
    hop header) on a reserve connection is served, and the connection closes
    after it (its answer says ``Connection: close``), so the reserve is held
    only while a peer's request is answered and the peer requests behind it
    in the backlog get their turn. A client's request there waits for a
    regular slot while at most half the reserve waits so, else it is
    answered 503 with ``Retry-After`` and the connection closed, without
    reaching the app (``_connection``)."""

    header: bytes
    """The request header that marks a request from a peer (lower case)."""
    connections: int
    """How many connections past ``max_connections``; 0: none."""
    counts: ReserveCounts = attrs.field(factory=ReserveCounts, eq=False)
    """Updated by the connections (``/metrics``)."""


@attrs.frozen(kw_only=True)
class HttpSettings:
    """How connections are served (``serve``; ``[limits]`` in agentik.toml)."""

    keep_alive_timeout: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    limits: ConnectionLimits = ConnectionLimits()
    """Request deadlines and the bound on open connections."""
    max_head_bytes: int = 16 * 1024
    """The largest request head; past it, 431."""
    peers: PeerReserve | None = None
    """The reserve for other nodes' requests past the bound; None: none."""
