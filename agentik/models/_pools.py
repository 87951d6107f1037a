"""The model's own connection pools: how many connections, in pools of what size.

A call takes a slot of the gate, then a free connection of one of these
pools (``free_connections``): the pools have as many connections as the gate
has slots, so a held slot never waits in a pool.
"""

from __future__ import annotations

import httpx2

from agentik._errors import ModelBackendError
from agentik.models._gate import FifoGate, Gate

DEFAULT_MAX_CONNECTIONS = 300
"""Model calls on the wire at once (and connections in the model's own pools).

Picked with ``python -m bench.model_client -n 1000 --variants pool100 default
pool1000`` (docs/models.md): with a 0.5 s model, 100 connections cap a
process at about 200 calls/s, so 1,000 conversations queue for seconds; 300
run within 1.1x of the ideal for their width at the same CPU per call as
1,000, and hosted providers cap concurrent requests well below that. Lower
it when the provider limits concurrent requests."""

MAX_OWN_CONNECTIONS = 100_000
"""Most connections a model opens itself (its gate's capacity sizes its pools)."""

SHARD_CONNECTIONS = 16
"""Connections in each of the model's own pools (``own_clients``)."""


def pool_gate(gate: Gate | None, max_connections: int | None, *, own_clients: bool) -> Gate:
    """The gate a model's calls wait in: ``gate``, or a ``FifoGate`` of
    ``max_connections`` (default ``DEFAULT_MAX_CONNECTIONS``); with
    ``own_clients``, its capacity sizes the model's pools, so it is bounded."""
    if gate is not None and max_connections is not None:
        raise ModelBackendError("give max_connections or gate, not both (a gate has its size)")
    if gate is None:
        return FifoGate(DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections)
    if own_clients and gate.capacity > MAX_OWN_CONNECTIONS:
        raise ModelBackendError(
            f"gate capacity must be at most {MAX_OWN_CONNECTIONS} (the model opens that"
            f" many connections), got {gate.capacity}; give the gate a capacity"
        )
    return gate


def own_clients(
    connections: int, connect_timeout: float | None = None
) -> tuple[httpx2.AsyncClient, ...]:
    """The model's own clients: ``connections`` connections in all, all kept
    alive, in pools of at most ``SHARD_CONNECTIONS``.

    httpx2's pool looks at each of its connections (and each request in
    flight) on every request and every release, so its CPU per call grows
    with its size: at 300 connections that scan was most of the client's
    cost (``python -m bench.model_client``, docs/models.md). Several small
    pools behind the one gate keep it flat. httpx2's default keeps 20 of 100
    alive, so a busy pool would close and reopen connections on every burst.
    No other timeout here: the call's deadline (a trio cancel scope) bounds
    every step; ``connect_timeout`` only makes one unanswered connect fail (and
    be retried) sooner.
    """
    sizes = [SHARD_CONNECTIONS] * (connections // SHARD_CONNECTIONS)
    if connections % SHARD_CONNECTIONS:
        sizes.append(connections % SHARD_CONNECTIONS)
    # One TLS context for all (loading the trust store costs ~20 ms each).
    tls = httpx2.create_ssl_context()
    return tuple(
        httpx2.AsyncClient(
            timeout=httpx2.Timeout(None, connect=connect_timeout),
            verify=tls,
            limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size),
        )
        for size in sizes
    )


def free_connections(clients: tuple[httpx2.AsyncClient, ...], slots: int) -> list[int] | None:
    """One entry per free connection of the model's own pools, naming its
    pool; None for a caller's one client (its pool is its own business)."""
    if len(clients) == 1:
        return None
    free = [shard for shard in range(len(clients)) for _ in range(SHARD_CONNECTIONS)][:slots]
    free.reverse()  # the first pool's connections are taken first
    return free
