"""Shard leases for several nodes on one PostgreSQL database: how a node
keeps its lease and its shards (``LeaseUpkeep``, the base of
``_leases.NodeLease``, which answers the agent's and the server's questions).

Why shards and why lease rows: ``_lease_sql``, with the one statement of a
round, run on a connection of its own every ``ROUND_SECONDS`` (a third of
the lease at most).

Invariants:
- a shard is taken only by a node whose own row is unexpired, from nobody or
  from an expired node, in one statement; expiry is judged by the database's
  clock, never a node's; each take raises the shard's ``generation``;
- a node stops using its shards *before* its row can expire: they count until
  the start of its last successful renewal plus the lease, less a margin
  (``owns``), so it has stopped before any other node may take over;
- when a renewal finds the row gone or expired, or renewals keep failing past
  that point, the node has lost every shard at once: it clears them, tells
  its subscribers (the agent interrupts its turns and drops its cached
  conversations), and joins again under a new node id;
- the writer locks the rows of the shards it writes to (``FOR SHARE``) and
  refuses a write unless the row names this node with the generation the
  node took it at (the fencing token): a takeover skips a shard a batch is
  writing, and no write of a node that lost a shard commits after it moved;
- a node with more than its share (a node joined) marks the surplus
  *releasing*, ``MOVE_AT_ONCE`` shards at a time: it takes no new turn for
  those shards (``owns`` is false: ``NotOwnedError`` without a URL; a
  forwarding node waits for the next holder), waits for their running turns
  (at most ``RELEASE_WAIT``), then releases them; a clean stop releases
  every shard, so other nodes take them at their next round;
- the node's row is also renewed from a thread of its own every round
  period (``_keep_alive``), apart from the event loop: a loop
  late under load (a thousand requests, a collection) delays the rounds,
  not the renewals, so a node lags without losing its lease. That thread only
  extends a lease still valid when its renewal began (it never revives a
  lapsed one: only a round, on the loop, rejoins), and a frozen process
  freezes it too, so the lease of a node that stopped still runs out.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

import psycopg
import trio

from agentik._errors import StoreError
from agentik.storage._shards import DEFAULT_SHARDS, check_shards
from agentik.storage.postgres import _lease_sql as sql
from agentik.storage.postgres._lease_link import LeaseLink
from agentik.storage.postgres._lease_sql import Fence, _round
from agentik.storage.postgres._watchdog import Watchdog

log = logging.getLogger("agentik.storage")
T = TypeVar("T")

ROUND_SECONDS = 2.0
"""Longest pause between two rounds (a third of the lease if shorter): how
soon shards freed by a node that stopped cleanly are taken."""
BUSY_ROUND_SECONDS = 0.25
"""Pause between rounds while shards are being handed off or this node is
below its share: a move takes a few of these, not a lease."""
UNSETTLED_SECONDS = 5.0
"""How long rounds stay fast after the live nodes or this node's shards
changed: long enough for the others to notice and hand shards off."""
MOVE_AT_ONCE = 16
"""Shards a node hands off at a time: a node joining a busy cluster takes
its share in steps of a few rounds, so only a few shards' new turns wait
(503, retry) at any moment, not half the cluster's."""
RELEASE_WAIT = 60.0
"""Longest wait for the running turns of a shard being handed off; a turn
still running then is interrupted (the shard's next holder resumes it)."""


class LeaseUpkeep:
    """This node's lease and shards, kept: the state, the rounds that renew
    the lease and move shards, the keep-alive thread, joining and leaving
    (the module docstring). ``NodeLease`` adds what others ask of it."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection],
        lease: float,
        url: str = "",
        *,
        watchdog: Watchdog,
        shards: int = DEFAULT_SHARDS,
    ) -> None:
        if not (isinstance(lease, int | float) and math.isfinite(lease) and lease >= 1):
            raise ValueError(f"lease_seconds must be a number >= 1, got {lease!r}")
        self.lease = float(lease)
        self._link = LeaseLink(connect, self.lease, watchdog)
        """The lease's own connection (``_lease_link``)."""
        self.shards = check_shards(shards)
        self._margin = min(1.0, self.lease / 4)
        self.node_id = ""
        """This generation's id; read by the writer's thread (one attribute read)."""
        self._url = url
        self._validity = threading.Lock()
        """Guards ``_valid_until`` and ``_renewed_at`` against the keep-alive thread."""
        self._held: dict[int, int] = {}
        """Shards held, with the generation each was taken at."""
        self._releasing: dict[int, float] = {}
        """Shards being handed off, with when that began."""
        self._elsewhere: dict[int, str] = {}
        """Shards other live nodes held at the last round, with their URLs:
        a request for one is redirected without asking the database, so
        requests that land on the wrong node never queue in front of the
        renewals on the lease's connection."""
        self._looking: trio.Event | None = None
        self._looked_at = -math.inf
        self._busy: dict[int, int] = {}
        """Turns running, by shard (``running``)."""
        self.fence = Fence(node_id="", shards=self.shards, generations={})
        """What the writer checks against (replaced whole, for its thread)."""
        self._valid_until = -math.inf
        self._lost_subscribers: list[Callable[[], None]] = []
        self._gained_subscribers: list[Callable[[], None]] = []
        self._peer_subscribers: list[Callable[[], None]] = []
        self._live_nodes = 1
        self._renewed_at: float | None = None
        """When the last successful renewal (or join) began; for ``/health``."""
        self._error: tuple[str, float] | None = None
        """The last renewal's or join's failure and when; for ``/health``."""
        self._wake = trio.Event()
        self._unsettled_until = -math.inf
        """Rounds come fast until then: the live nodes or this node's shards
        changed lately, so shards may be about to be freed for it."""

    async def _db(self, operation: Callable[..., T], *args: object) -> T:
        """Every call of the loop on the lease's connection (``LeaseLink.db``)."""
        return await self._link.db(operation, *args)

    def _valid(self) -> bool:
        return trio.current_time() < self._valid_until

    def _target(self) -> int:
        return math.ceil(self.shards / self._live_nodes)

    def peer_urls(self) -> frozenset[str]:
        return frozenset(self._elsewhere.values())

    def _see_elsewhere(self, elsewhere: dict[int, str]) -> None:
        """The other nodes' shards as a round or a look-up found them; tell
        the subscribers if the set of their URLs changed."""
        before = self.peer_urls()
        self._elsewhere = elsewhere
        if self.peer_urls() != before:
            self._tell(self._peer_subscribers)

    @staticmethod
    def _subscribe(
        subscribers: list[Callable[[], None]], callback: Callable[[], None]
    ) -> Callable[[], None]:
        subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in subscribers:
                subscribers.remove(callback)

        return unsubscribe

    @staticmethod
    def _tell(subscribers: list[Callable[[], None]]) -> None:
        for callback in list(subscribers):
            callback()

    # --- the shards held ---

    def _hold(self, generations: Mapping[int, int]) -> None:
        self._held.update(generations)
        self._publish()

    def _publish(self) -> None:
        self.fence = Fence(node_id=self.node_id, shards=self.shards, generations=dict(self._held))

    def _lose(self) -> None:
        if not self._held and self._valid_until == -math.inf:
            return
        log.warning("node %s lost its lease: its shards may move to other nodes", self.node_id)
        self._held.clear()
        self._releasing.clear()
        with self._validity:
            self._valid_until = -math.inf
        self._publish()
        self._tell(self._lost_subscribers)

    def _releasable(self) -> list[int]:
        """Shards handed off whose turns are done (or waited long enough)."""
        now = trio.current_time()
        return sorted(
            shard
            for shard, since in self._releasing.items()
            if not self._busy.get(shard) or now - since >= RELEASE_WAIT
        )

    def _mark_surplus(self) -> None:
        """Hand off what is above this node's share: the shards with the
        fewest running turns first."""
        surplus = min(
            len(self._held) - len(self._releasing) - self._target(),
            MOVE_AT_ONCE - len(self._releasing),
        )
        if surplus <= 0:
            return
        now = trio.current_time()
        keep = sorted(
            (s for s in self._held if s not in self._releasing),
            key=lambda s: (self._busy.get(s, 0), -s),
        )
        for shard in keep[:surplus]:
            self._releasing[shard] = now
        log.info(
            "node %s hands %d shard(s) off (%d live nodes)", self.node_id, surplus, self._live_nodes
        )

    async def round(self) -> None:
        """One round: renew, release what was handed off, take free shards up
        to this node's share (the module docstring)."""
        began = trio.current_time()
        release = self._releasable()
        before = dict(self._held)
        result = await self._db(_round, self.node_id, self.lease, self.shards, release)
        if result.live_nodes != self._live_nodes or result.released or result.taken:
            self._unsettled_until = trio.current_time() + UNSETTLED_SECONDS
        self._live_nodes = result.live_nodes
        self._see_elsewhere(result.elsewhere)
        if self._valid_until == -math.inf:
            return  # lost while the round was under way: join anew
        if not result.renewed:  # the row expired: others may hold our shards already
            self._error = ("renewal: the node's row had expired", trio.current_time())
            self._lose()
            return
        self._extend(began)
        for shard in result.released:
            self._releasing.pop(shard, None)
        # A shard ``claim`` took after this round's statement ran is not in
        # its answer: kept (the two share the connection, one after the other).
        claimed = {s: g for s, g in self._held.items() if before.get(s) != g}
        self._held = {**result.held, **claimed}
        for shard in list(self._releasing):
            if shard not in self._held:
                del self._releasing[shard]
        self._publish()
        self._mark_surplus()
        if result.taken:
            self._tell(self._gained_subscribers)

    # --- the lease's life ---

    async def join(self) -> None:
        """Register under a new node id (at start, and after losing the
        lease), and take this node's share of the free shards."""
        node_id = uuid.uuid4().hex
        began = trio.current_time()
        await self._db(sql._register, node_id, self._url, self.lease)
        self.node_id = node_id
        self._held.clear()
        self._releasing.clear()
        with self._validity:
            self._valid_until = began + self.lease - self._margin
            self._renewed_at = began
        self._unsettled_until = began + UNSETTLED_SECONDS + self.lease / 3
        self._publish()
        log.info("node %s joined (lease %.0f s, %d shards)", node_id, self.lease, self.shards)
        try:
            await self.round()
        except StoreError as error:  # the shards can wait for the next round
            log.warning("node %s could not take shards yet: %s", node_id, error)

    async def run(self) -> None:
        """Run rounds until cancelled, rejoin after a loss, and (a watchdog
        beside it) give every shard up the moment the lease runs out
        locally, even while a round hangs on a dead network."""
        stop = threading.Event()
        keeper = threading.Thread(
            target=self._keep_alive,
            args=(trio.lowlevel.current_clock(), stop),
            name="agentik-lease-keep-alive",
            daemon=True,  # a call it waits on is bounded by the watchdog; nobody joins it
        )
        keeper.start()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watchdog)
                await self._renew_loop()
        finally:
            stop.set()

    def _extend(self, began: float, node_id: str | None = None) -> None:
        """A renewal that began at ``began`` (loop time) went through: the
        lease counts until then plus the lease, less the margin (never less
        than a later renewal made it). With ``node_id`` (the keep-alive's),
        not if the lease lapsed or the node rejoined meanwhile."""
        with self._validity:
            if node_id is not None and (node_id != self.node_id or began >= self._valid_until):
                return
            self._valid_until = max(self._valid_until, began + self.lease - self._margin)
            self._renewed_at = max(began, self._renewed_at or began)

    def _keep_alive(self, clock: trio.abc.Clock, stop: threading.Event) -> None:
        """In a thread of its own: renew the node's row every round period
        (while the lease is valid), whatever the event loop is doing.
        Failures are left to the rounds, which report them."""
        while not stop.wait(self._period):
            node_id = self.node_id
            began = clock.current_time()
            if not node_id or began >= self._valid_until:
                continue  # not joined, or lapsed: the loop's rounds rejoin
            try:
                with self._link.using:
                    if stop.is_set():  # run ended: ``leave`` may have closed the connection
                        return
                    renewed = self._link.call_held(sql._renew, node_id, self.lease)
            except (psycopg.Error, StoreError):
                continue
            if renewed:
                self._extend(began, node_id)

    @property
    def _period(self) -> float:
        """The longest pause between two rounds (and two renewals)."""
        return min(self.lease / 3, ROUND_SECONDS)

    def _pause(self) -> float:
        period = self._period
        moving = self._releasing or len(self._held) > self._target()
        if moving or trio.current_time() < self._unsettled_until:
            return min(period, BUSY_ROUND_SECONDS)
        return period

    async def _renew_loop(self) -> None:
        while True:
            if self._valid_until == -math.inf:
                await trio.sleep(min(1.0, self.lease / 3))
                try:
                    await self.join()
                except StoreError as error:
                    log.warning("node could not join: %s", error)
                    self._error = (f"join: {error}", trio.current_time())
                continue
            with trio.move_on_after(self._pause()):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.round()
            except StoreError as error:
                log.warning("node lease renewal failed: %s", error)
                self._error = (f"renewal: {error}", trio.current_time())

    async def _watchdog(self) -> None:
        while True:
            if self._valid_until == -math.inf:
                await trio.sleep(min(1.0, self.lease / 3))
                continue
            await trio.sleep_until(self._valid_until)
            if trio.current_time() >= self._valid_until:
                self._lose()

    async def leave(self) -> None:
        """Release every shard at once (a clean stop), and close."""
        try:
            if self.node_id and self._valid_until > -math.inf:
                await self._db(sql._leave, self.node_id)
        except StoreError as error:
            log.warning("could not leave the cluster cleanly (%s); the lease will expire", error)
        finally:
            self._held.clear()
            self._releasing.clear()
            with self._validity:
                self._valid_until = -math.inf
            self._publish()
            self._link.close()
