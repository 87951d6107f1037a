"""Conversation ownership for several nodes on one PostgreSQL database.

Why lease rows, not advisory locks: a session-level advisory lock per
conversation lives in PostgreSQL's shared lock table (about
``max_locks_per_transaction × max_connections`` slots, 6,400 by default), so
100,000 live conversations could not each hold one; and a lock vanishes the
moment its connection drops, so a node cut off for a second would lose all
its conversations while it still runs their turns. Lease rows cost one row
per conversation and one renewal per *node*: each node has a row in
``agentik_node`` whose ``expires_at`` it pushes forward every third of the
lease, and owns the conversations whose ``conversation_owner`` row names it
for as long as that row lives. A node that dies stops renewing; once its row
expires, the next request for one of its conversations, on any node, claims
it there.

Invariants:
- a claim succeeds only for a node whose own row is unexpired, on a
  conversation free or owned by an expired (or the same) node, in one
  statement; expiry is judged by the database's clock, never a node's;
- a node stops using its claims *before* its row can expire: its claims count
  until the start of its last successful renewal plus the lease, less a
  margin (``owns``), so it has stopped before any other node may take over;
- when a renewal finds the row gone or expired, or renewals keep failing past
  that point, the node has lost every conversation at once: it clears its
  claims, tells its subscribers (the agent cancels its turns and drops its
  cached conversations), and joins again under a new node id;
- the writer locks the ``conversation_owner`` rows of the conversations it
  writes messages to (``FOR SHARE``) and refuses those it does not own, so a
  takeover waits for a batch under way and no write of a node that lost a
  conversation commits after the takeover.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from typing import TypeVar, final

import psycopg
import trio

from agentik._errors import NotOwnedError, StoreError
from agentik.storage._lease_state import LeaseState
from agentik.storage.postgres._watchdog import Watchdog

log = logging.getLogger("agentik.storage")
T = TypeVar("T")

_CLAIM = """
WITH me AS (
    SELECT 1 FROM agentik_node WHERE node_id = %(me)s AND expires_at > clock_timestamp()
), claimed AS (
    INSERT INTO conversation_owner AS o (conversation_id, node_id)
    SELECT %(c)s, %(me)s FROM me
    ON CONFLICT (conversation_id) DO UPDATE
        SET node_id = excluded.node_id, claimed_at = clock_timestamp()
        WHERE o.node_id = excluded.node_id OR NOT EXISTS (
            SELECT 1 FROM agentik_node AS n
            WHERE n.node_id = o.node_id AND n.expires_at > clock_timestamp())
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM me), EXISTS (SELECT 1 FROM claimed), (
    SELECT n.url FROM conversation_owner AS o JOIN agentik_node AS n USING (node_id)
    WHERE o.conversation_id = %(c)s AND n.node_id <> %(me)s
      AND n.expires_at > clock_timestamp())
"""

_REGISTER = """
INSERT INTO agentik_node (node_id, url, expires_at)
VALUES (%(me)s, %(url)s, clock_timestamp() + make_interval(secs => %(lease)s))
"""

_RENEW = """
UPDATE agentik_node SET expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE node_id = %(me)s AND expires_at > clock_timestamp()
RETURNING 1
"""

# Rows of nodes dead for a while: their conversations are free either way.
_FORGET_DEAD = """
WITH dead AS (
    DELETE FROM agentik_node WHERE expires_at < clock_timestamp() - interval '10 minutes'
    RETURNING node_id
)
DELETE FROM conversation_owner WHERE node_id IN (SELECT node_id FROM dead)
"""


_LAPSED = "this node's lease has lapsed; it owns no conversation until it renews"


def _claim(
    connection: psycopg.Connection, me: str, conversation_id: str
) -> tuple[bool, bool, str | None]:
    row = connection.execute(_CLAIM, {"me": me, "c": conversation_id.encode()}).fetchone()
    assert row is not None
    alive, claimed, url = row
    return bool(alive), bool(claimed), url


def _register(connection: psycopg.Connection, me: str, url: str, lease: float) -> None:
    with connection.transaction():
        connection.execute(_FORGET_DEAD)
        connection.execute(_REGISTER, {"me": me, "url": url, "lease": lease})


_LIVE_NODES = "SELECT count(*) FROM agentik_node WHERE expires_at > clock_timestamp()"


def _renew(connection: psycopg.Connection, me: str, lease: float) -> tuple[bool, int]:
    """Push this node's lease on; with how many nodes are live (for the model's limits)."""
    renewed = connection.execute(_RENEW, {"me": me, "lease": lease}).fetchone() is not None
    return renewed, _live_nodes(connection)


def _live_nodes(connection: psycopg.Connection) -> int:
    row = connection.execute(_LIVE_NODES).fetchone()
    return max(1, int(row[0])) if row is not None else 1


def _advertise(connection: psycopg.Connection, me: str, url: str) -> None:
    connection.execute("UPDATE agentik_node SET url = %s WHERE node_id = %s", (url, me))


def _leave(connection: psycopg.Connection, me: str) -> None:
    with connection.transaction():
        connection.execute("DELETE FROM conversation_owner WHERE node_id = %s", (me,))
        connection.execute("DELETE FROM agentik_node WHERE node_id = %s", (me,))


@final
class NodeLease:
    """This node's lease and claims: the bundle's ``ConversationOwnership``.

    Runs in the bundle's nursery (``run``); talks to the database on a
    connection of its own (``agentik-lease``), from one worker thread at a
    time, so a busy writer never delays a renewal."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection],
        lease: float,
        url: str = "",
        *,
        watchdog: Watchdog,
    ) -> None:
        if not (isinstance(lease, int | float) and math.isfinite(lease) and lease >= 1):
            raise ValueError(f"lease_seconds must be a number >= 1, got {lease!r}")
        self._connect = connect
        self._calls = watchdog
        """Bounds each call on the lease's connection (``_watchdog``)."""
        self.lease = float(lease)
        self._margin = min(1.0, self.lease / 4)
        self.node_id = ""
        """This generation's id; read by the writer's thread (one attribute read)."""
        self._url = url
        self._connection: psycopg.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._owned: set[str] = set()
        self._valid_until = -math.inf
        self._subscribers: list[Callable[[], None]] = []
        self._live_nodes = 1
        self._renewed_at: float | None = None
        """When the last successful renewal (or join) began; for ``/health``."""
        self._error: tuple[str, float] | None = None
        """The last renewal's or join's failure and when; for ``/health``."""

    # --- the database, from a worker thread ---

    def _call(self, operation: Callable[..., T], *args: object) -> T:
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            if connection is not None:
                connection.close()
            connection = self._connection = self._connect()
        with self._calls.watch(connection):
            return operation(connection, *args)

    async def _db(self, operation: Callable[..., T], *args: object) -> T:
        try:
            return await trio.to_thread.run_sync(
                self._call, operation, *args, limiter=self._limiter
            )
        except psycopg.Error as error:
            raise StoreError(f"the node lease's database call failed: {error}") from error

    # --- ConversationOwnership ---

    def owns(self, conversation_id: str) -> bool:
        return conversation_id in self._owned and trio.current_time() < self._valid_until

    async def claim(self, conversation_id: str) -> None:
        for _ in range(3):  # a claim races only another claim: the loser looks again
            if trio.current_time() >= self._valid_until:
                raise StoreError(
                    "this node's lease has lapsed; it owns no conversation until it renews"
                )
            alive, claimed, url = await self._db(_claim, self.node_id, conversation_id)
            if claimed:
                self._owned.add(conversation_id)
                return
            if not alive:
                raise StoreError(
                    "this node's lease has lapsed; it owns no conversation until it renews"
                )
            if url is not None:
                raise NotOwnedError(
                    f"conversation {conversation_id!r} is owned by the node at {url}",
                    owner_url=url,
                )
        raise StoreError(f"conversation {conversation_id!r} could not be claimed; retry")

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    @property
    def live_nodes(self) -> int:
        """Nodes live at the last renewal (``ConversationOwnership.live_nodes``):
        each keeps its share of the model's limits."""
        return self._live_nodes

    def lease_state(self) -> LeaseState:
        now = trio.current_time()
        valid = now < self._valid_until
        error, error_at = self._error if self._error is not None else (None, None)
        return LeaseState(
            node_id=self.node_id,
            valid=valid,
            lease_seconds=self.lease,
            conversations=len(self._owned) if valid else 0,
            live_nodes=self._live_nodes,
            renewed_seconds_ago=None if self._renewed_at is None else now - self._renewed_at,
            valid_for_seconds=self._valid_until - now if valid else 0.0,
            last_error=error,
            last_error_seconds_ago=None if error_at is None else now - error_at,
        )

    async def advertise(self, url: str) -> None:
        self._url = url
        await self._db(_advertise, self.node_id, url)

    # --- the lease's life ---

    async def join(self) -> None:
        """Register under a new node id (at start, and after losing the lease)."""
        node_id = uuid.uuid4().hex
        began = trio.current_time()
        await self._db(_register, node_id, self._url, self.lease)
        self.node_id = node_id
        try:
            self._live_nodes = await self._db(_live_nodes)
        except StoreError as error:  # the count can wait for the next renewal
            log.warning("could not count the live nodes: %s", error)
        self._valid_until = began + self.lease - self._margin
        self._renewed_at = began
        log.info("node %s joined (lease %.0f s)", node_id, self.lease)

    def _lose(self) -> None:
        if not self._owned and self._valid_until == -math.inf:
            return
        log.warning(
            "node %s lost its lease: its conversations may move to other nodes", self.node_id
        )
        self._owned.clear()
        self._valid_until = -math.inf
        for callback in list(self._subscribers):
            callback()

    async def run(self) -> None:
        """Renew every third of the lease until cancelled, rejoin after a loss,
        and (a watchdog beside it) give every claim up the moment the lease
        runs out locally, even while a renewal hangs on a dead network."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watchdog)
            await self._renew_loop()

    async def _renew_loop(self) -> None:
        period = self.lease / 3
        while True:
            if self._valid_until == -math.inf:
                await trio.sleep(min(1.0, period))
                try:
                    await self.join()
                except StoreError as error:
                    log.warning("node could not join: %s", error)
                    self._error = (f"join: {error}", trio.current_time())
                continue
            await trio.sleep(period)
            began = trio.current_time()
            try:
                renewed, self._live_nodes = await self._db(_renew, self.node_id, self.lease)
            except StoreError as error:
                log.warning("node lease renewal failed: %s", error)
                self._error = (f"renewal: {error}", trio.current_time())
                continue  # the watchdog gives the claims up when the lease runs out
            if self._valid_until == -math.inf:
                continue  # lost while the renewal was under way: join anew
            if renewed:
                self._valid_until = began + self.lease - self._margin
                self._renewed_at = began
            else:  # the row expired: others may own our conversations already
                self._error = ("renewal: the node's row had expired", trio.current_time())
                self._lose()

    async def _watchdog(self) -> None:
        while True:
            if self._valid_until == -math.inf:
                await trio.sleep(min(1.0, self.lease / 3))
                continue
            await trio.sleep_until(self._valid_until)
            if trio.current_time() >= self._valid_until:
                self._lose()

    async def leave(self) -> None:
        """Give every conversation up at once (a clean stop), and close."""
        try:
            if self.node_id and self._valid_until > -math.inf:
                await self._db(_leave, self.node_id)
        except StoreError as error:
            log.warning("could not leave the cluster cleanly (%s); the lease will expire", error)
        finally:
            self._owned.clear()
            self._valid_until = -math.inf
            if self._connection is not None:
                self._connection.close()
