"""How connections are served: the settings ``serve`` takes (``[limits]`` in
agentik.toml), apart from the connection that applies them."""

from __future__ import annotations

import attrs

from agentik.server.http._timer import ConnectionLimits


@attrs.frozen(kw_only=True)
class HttpSettings:
    """How connections are served (``serve``; ``[limits]`` in agentik.toml)."""

    keep_alive_timeout: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    limits: ConnectionLimits = ConnectionLimits()
    """Request deadlines and the bound on open connections."""
    max_head_bytes: int = 16 * 1024
    """The largest request head; past it, 431."""
