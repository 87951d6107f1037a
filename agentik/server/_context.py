"""What every handler shares: the agent, the configuration, and server-wide counters.

One ``ServerContext`` per running server. It holds no conversation state:
history, activations and turns live in the agent and its store; what a
protocol keeps beyond them (the A2A task ledger) is its own package's
(``agentik.server.a2a``).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from agentik.agent import ChatAgent
from agentik.server._peers import PeerClient
from agentik.server._settings import ServerConfig
from agentik.server.http import ReserveCounts
from agentik.storage import WriterStats

if TYPE_CHECKING:
    from agentik.a2a_client import A2AToolset
    from agentik.mcp import McpToolset


@attrs.define
class ServerContext:
    agent: ChatAgent
    config: ServerConfig
    model_label: str
    """What answers: ``scripted demo model`` or ``<model> at <base_url>``."""
    demo_model: bool
    storage_label: str
    writer_gauges: Callable[[], WriterStats | None] = lambda: None
    started: float = attrs.field(factory=time.monotonic)
    http_requests: collections.Counter[str] = attrs.field(factory=collections.Counter)
    mcp: tuple[McpToolset, ...] = ()
    """MCP servers served as toolsets, for their health."""
    a2a: tuple[A2AToolset, ...] = ()
    """Remote A2A agents served as toolsets, for their health."""
    base_url: str = "http://127.0.0.1:8080"
    """The URL clients reach this server at (the A2A card's interface URL)."""
    background: trio.Nursery | None = None
    """Where turns that outlive their request run (A2A ``returnImmediately``):
    the server's own nursery, so shutdown waits for them."""
    reserve_counts: ReserveCounts | None = None
    """A node that forwards: what happened at its connection bound (``/metrics``)."""
    peers: PeerClient | None = None
    """Several nodes on one database, ``[cluster] forward`` on: the client
    that forwards requests to the node that owns their conversation
    (``_forward``); None answers 307 to that node instead."""

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started
