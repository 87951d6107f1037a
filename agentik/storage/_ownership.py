"""The protocol of which node runs a conversation, when several nodes share
one database: ``ConversationOwnership``, carried beside the stores in a
``StorageBundle`` (``_protocols``).

Apart from the store protocols because it describes no store: no data
passes through it, only the node's hold on conversations (its shards and its
lease), which the agent asks before it runs a turn and the storage before it
writes. The PostgreSQL backend implements it (``postgres._leases``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentik.storage._lease_state import LeaseState


class ConversationOwnership(Protocol):
    """Which node of several sharing one database runs a conversation's turns
    (PostgreSQL with ``lease_seconds``; docs/scale-out.md).

    Nodes hold shards, each conversation lives in one (a stable hash of its
    id), and a node owns the conversations of the shards it holds, for as
    long as its lease lives. The agent checks ``owns`` before it routes a
    request (``claim`` when it does not), ``tenure`` before each model and
    tool call, and the storage refuses message writes to conversations of
    shards the node does not hold, so two nodes never run or write one
    conversation at once."""

    def owns(self, conversation_id: str) -> bool:
        """Whether this node owns it now and takes new turns for it, without
        asking the database (false for a shard being handed off)."""
        ...

    async def claim(self, conversation_id: str) -> None:
        """Own it (its shard was free, or its holder's lease expired), or
        raise ``NotOwnedError`` naming the live owner's URL (an empty URL: no
        node can take it right now, retry); ``StoreError`` if this node
        cannot own anything now (its own lease lapsed)."""
        ...

    def tenure(self, conversation_id: str) -> str | None:
        """An opaque token of this node's hold on the conversation, the same
        for as long as the hold lasts (a shard being handed off included);
        None while it does not hold it. A task started under one tenure runs
        no call under another."""
        ...

    def running(self, conversation_id: str) -> AbstractContextManager[object]:
        """Around a turn of the conversation: a shard handed off to another
        node waits for the turns running in it."""
        ...

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from a trio task) when this node loses every
        conversation at once (its lease lapsed); returns the unsubscribe."""
        ...

    def on_gained(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from a trio task) when this node takes shards
        (the agent resumes their interrupted turns); returns the unsubscribe."""
        ...

    async def advertise(self, url: str) -> None:
        """Where other nodes send this node's conversations' requests."""
        ...

    @property
    def live_nodes(self) -> int:
        """Nodes whose lease was live at the last renewal, at least 1: each
        node keeps its share of the model's limits (``ModelLimits``)."""
        ...

    def lease_state(self) -> LeaseState:
        """The node's lease as it measures it, without asking the database
        (``/health``)."""
        ...

    def peer_urls(self) -> frozenset[str]:
        """The advertised URLs of the other live nodes holding shards, as of
        the last round: a request forwarded to a node no longer among them
        is given up and asked about again (its lease expired)."""
        ...

    def holder_url(self, conversation_id: str) -> str | None:
        """The advertised URL of the other live node that held the
        conversation's shard at the last round, without asking the database;
        None if this node holds it, or no other node did."""
        ...

    def on_peers(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from a trio task) when ``peer_urls`` changed;
        returns the unsubscribe."""
        ...
