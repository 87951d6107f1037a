"""What a node knows of its own lease, for ``/health`` (docs/scale-out.md).

A value read from the lease's state without asking the database: ``/health``
is answered in microseconds however slow the database is, and a load balancer
that takes the node out while it holds no valid lease sends it no turn it
would refuse."""

from __future__ import annotations

import attrs

from agentik._errors import StoreError


class LeaseLapsedError(StoreError):
    """This node's lease has lapsed: it owns no conversation until it renews
    (or joins again). Nothing ran; another node takes its shards."""


@attrs.frozen(kw_only=True)
class LeaseState:
    """A node's lease as the node measures it, on its own monotonic clock."""

    node_id: str
    """This lease generation's id ("" before the first join)."""
    valid: bool
    """Whether the node may run turns of the conversations it owns now: its
    last successful renewal plus the lease, less the margin, is still ahead."""
    lease_seconds: float
    conversations: int
    """Conversations it holds by a claim of their own: always 0 since nodes
    hold shards (``shards``); kept for readers of ``/health``."""
    live_nodes: int
    """Nodes live at the last renewal, this one included."""
    renewed_seconds_ago: float | None
    """Seconds since the start of the last successful renewal (or join),
    kept while the lease is lapsed (how long it has been); None before the
    first join."""
    valid_for_seconds: float
    """Seconds of validity left (0 when not valid)."""
    last_error: str | None = None
    """The last renewal's (or join's) failure, kept after later successes so
    an operator sees that renewals have been failing; None if none failed."""
    last_error_seconds_ago: float | None = None
    """Seconds since that failure."""
    shards: int = 0
    """Shards it holds now, those being handed off included (0 while the
    lease is not valid): it owns the conversations in them."""
    releasing: int = 0
    """Of those, shards being handed off to another node (a node joined):
    their running turns finish here, new ones are refused."""
    total_shards: int = 0
    """Shards the database is split into (``[storage] shards``)."""
