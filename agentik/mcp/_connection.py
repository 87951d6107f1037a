"""One live connection to an MCP server, as its manager loop sees it.

``Connection`` carries the signals of one connection to the loop (closed, a
changed listing, a suspected hang), replaced on each reconnect; ``Era`` is
how the last good connection settled the protocol, so the next connects the
same way.
"""

from __future__ import annotations

import attrs
import mcp.types as mt
import trio
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


@attrs.frozen
class Era:
    """How the last good connection settled the protocol, to reconnect the same way.

    ``auto`` costs a ``server/discover`` probe, a wasted round trip against a
    server of the current stable version (2025-11-25), which answers it with
    an error before the ``initialize`` handshake. The SDK has no other way
    to learn the era, so the first connection probes and later ones reuse
    the answer: the handshake (``legacy``), or the modern version with its
    discover result (``prior_discover``). It is forgotten when a connection
    made with it fails before its tools are listed (the server changed).
    """

    mode: str
    discover: mt.DiscoverResult | None


@attrs.define(eq=False)
class Connection:
    """Signals from one live connection to the manager loop; replaced on reconnect."""

    closed: bool = False
    refresh: bool = False
    suspect: bool = False
    wake: trio.Event = attrs.field(factory=trio.Event)

    def poke(self) -> None:
        self.wake.set()


def era_of(client: Client) -> Era:
    version = client.protocol_version
    if version in MODERN_PROTOCOL_VERSIONS:
        return Era(version, client.session.discover_result)
    return Era("legacy", None)


def close(conn: Connection) -> None:
    conn.closed = True
    conn.poke()
