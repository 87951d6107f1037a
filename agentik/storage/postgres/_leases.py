"""``NodeLease``: this node's lease and shards as the agent and the server
ask about them (``ConversationOwnership``): whether it owns a conversation,
claiming one, which node holds another's, its state for ``/health``.

How the lease is kept (the rounds, the renewals, the keep-alive thread, the
hand-offs) and the invariants it keeps: ``_lease_upkeep``, its base.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import final

import trio

from agentik._errors import NotOwnedError, StoreError
from agentik.storage._lease_state import LeaseLapsedError, LeaseState
from agentik.storage._shards import shard_of
from agentik.storage.postgres import _lease_sql as sql
from agentik.storage.postgres._lease_sql import _elsewhere
from agentik.storage.postgres._lease_upkeep import LeaseUpkeep

log = logging.getLogger("agentik.storage")

LOOK_AGAIN = 0.2
"""Seconds between two look-ups of the shards' holders outside the rounds."""

_LAPSED = "this node's lease has lapsed; it owns no conversation until it renews"


@final
class NodeLease(LeaseUpkeep):
    """This node's lease and shards: the bundle's ``ConversationOwnership``.

    Runs in the bundle's nursery (``run``); talks to the database on a
    connection of its own (``agentik-lease``: ``_lease_link``), from one
    worker thread at a time, so a busy writer never delays a renewal."""

    def shard_of(self, conversation_id: str) -> int:
        return shard_of(conversation_id, self.shards)

    def owns(self, conversation_id: str) -> bool:
        shard = shard_of(conversation_id, self.shards)
        return shard in self._held and shard not in self._releasing and self._valid()

    def tenure(self, conversation_id: str) -> str | None:
        shard = shard_of(conversation_id, self.shards)
        generation = self._held.get(shard)
        if generation is None or not self._valid():
            return None
        return f"{self.node_id}/{shard}/{generation}"

    @contextmanager
    def running(self, conversation_id: str) -> Iterator[None]:
        shard = shard_of(conversation_id, self.shards)
        self._busy[shard] = self._busy.get(shard, 0) + 1
        try:
            yield
        finally:
            left = self._busy[shard] - 1
            if left:
                self._busy[shard] = left
            else:
                del self._busy[shard]
                if shard in self._releasing:
                    self._wake.set()  # the hand-off need not wait for the next round

    async def claim(self, conversation_id: str) -> None:
        shard = shard_of(conversation_id, self.shards)
        if not self._valid():
            raise LeaseLapsedError(_LAPSED)
        if shard in self._releasing:
            raise NotOwnedError(
                f"conversation {conversation_id!r} is moving to another node; retry",
                owner_url="",
            )
        if shard in self._held:
            return
        url = self._elsewhere.get(shard)
        if url is not None:  # as of the last round: a stale answer costs one more hop
            raise NotOwnedError(
                f"conversation {conversation_id!r} is owned by the node at {url}", owner_url=url
            )
        if len(self._held) >= self._target():  # not ours to take: another node's, or soon
            await self._look_elsewhere()
            url = self._elsewhere.get(shard)
            if url is not None:
                raise NotOwnedError(
                    f"conversation {conversation_id!r} is owned by the node at {url}",
                    owner_url=url,
                )
            raise NotOwnedError(
                f"conversation {conversation_id!r} is in shard {shard}, which no node holds"
                " right now; retry",
                owner_url="",
            )
        alive, generation, url = await self._db(sql._claim, self.node_id, shard, True)
        if generation is not None and alive and self._valid():
            self._hold({shard: generation})
            self._tell(self._gained_subscribers)
            return
        if not alive or not self._valid():
            raise LeaseLapsedError(_LAPSED)
        if url is not None:
            raise NotOwnedError(
                f"conversation {conversation_id!r} is owned by the node at {url}", owner_url=url
            )
        raise NotOwnedError(
            f"conversation {conversation_id!r} is in shard {shard}, which no node holds"
            " right now; retry",
            owner_url="",
        )

    async def _look_elsewhere(self) -> None:
        """Refresh the map of other nodes' shards (a shard moved since the last
        round): one query for every request that wants it meanwhile, and at
        most one per ``LOOK_AGAIN`` seconds, so requests in a hand-off queue
        no more than one small query in front of the renewals."""
        if trio.current_time() - self._looked_at < LOOK_AGAIN:
            return
        looking = self._looking
        if looking is not None:
            await looking.wait()
            return
        self._looking = looking = trio.Event()
        try:
            self._see_elsewhere(await self._db(_elsewhere, self.node_id))
            self._looked_at = trio.current_time()
        except StoreError as error:
            log.warning("could not look up which nodes hold the shards: %s", error)
        finally:
            self._looking = None
            looking.set()

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribe(self._lost_subscribers, callback)

    def on_gained(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribe(self._gained_subscribers, callback)

    def on_peers(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribe(self._peer_subscribers, callback)

    def holder_url(self, conversation_id: str) -> str | None:
        shard = shard_of(conversation_id, self.shards)
        return None if shard in self._held else self._elsewhere.get(shard)

    @property
    def live_nodes(self) -> int:
        """Nodes live at the last renewal (``ConversationOwnership.live_nodes``):
        each keeps its share of the model's limits."""
        return self._live_nodes

    def held_shards(self) -> frozenset[int]:
        """The shards this node holds now (none while its lease is not valid)."""
        return frozenset(self._held) if self._valid() else frozenset()

    def releasing_shards(self) -> frozenset[int]:
        return frozenset(self._releasing)

    def lease_state(self) -> LeaseState:
        now = trio.current_time()
        valid = now < self._valid_until
        error, error_at = self._error if self._error is not None else (None, None)
        return LeaseState(
            node_id=self.node_id,
            valid=valid,
            lease_seconds=self.lease,
            conversations=0,
            live_nodes=self._live_nodes,
            renewed_seconds_ago=None if self._renewed_at is None else now - self._renewed_at,
            valid_for_seconds=self._valid_until - now if valid else 0.0,
            last_error=error,
            last_error_seconds_ago=None if error_at is None else now - error_at,
            shards=len(self._held) if valid else 0,
            releasing=len(self._releasing) if valid else 0,
            total_shards=self.shards,
        )

    async def advertise(self, url: str) -> None:
        self._url = url
        await self._db(sql._advertise, self.node_id, url)
