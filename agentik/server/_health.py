"""What ``/health`` says of the storage: a bounded probe, as a turn would see it.

A turn reads its conversation through the bundle's reader pool (its queue, a
worker thread, a read connection) and writes through the writer. The probe
takes the same read (``load_conversation`` of an id no client can name, one
message per page: a few index look-ups) and looks at the writer's state
without touching the database: stopped, or stuck on one commit longer than
the probe's bound. While writes are failing (``WriterStats.failing``: the last
write failed for a reason of the storage, and none committed since) the probe
also writes one small internal record, so a storage that recovered is seen to
have recovered though no turn came (a load balancer sends none to a node it
took out). A database that hangs (a frozen PostgreSQL, a disk that
stopped answering) so shows within ``PROBE_TIMEOUT``, though no write has
failed yet.

The read runs in a task of its own, at most one at a time, and its answer is
reused for ``PROBE_REUSE`` seconds: however many clients ask, the probe reads
at most once a second, so ``/health`` (which needs no token) cannot be used
to load the database. A request waits for the probe at most until the probe
is ``PROBE_TIMEOUT`` old; a probe still unanswered then is the answer, and
later requests hear how long it has been waiting without starting another.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import final

import attrs
import trio

from agentik.storage import Storage, WriterStats

PROBE_TIMEOUT = 2.0
"""Seconds the storage has to answer the probe: a read takes milliseconds,
and a load balancer's own check usually gives up after a few seconds."""
PROBE_REUSE = 1.0
"""Seconds a probe's answer is reused."""
PROBE_CONVERSATION = "\x00agentik-health-probe"
"""No transport accepts a conversation id with U+0000, so this one is empty."""
PROBE_RECORD = "agentik.health-probe"
"""The internal record (``SecretStore``, a namespace no client names) the
probe writes while writes are failing: the write a turn would make."""


@attrs.frozen(kw_only=True)
class ProbeAnswer:
    """The storage's state as a turn would find it."""

    error: str | None = None
    """Why a turn would fail or hang now; None if it would not."""
    ms: float | None = None
    """How long the probe's read took."""
    at: datetime = attrs.field(factory=lambda: datetime.now(UTC))

    @property
    def ok(self) -> bool:
        return self.error is None


@final
class _Run:
    __slots__ = ("began", "done")

    def __init__(self, began: float) -> None:
        self.began = began
        self.done = trio.Event()


@final
class StorageProbe:
    """One probe at a time of one bundle; ``check`` is what ``/health`` awaits."""

    def __init__(
        self,
        storage: Storage,
        writer: Callable[[], WriterStats | None],
        *,
        timeout: float = PROBE_TIMEOUT,
        reuse: float = PROBE_REUSE,
    ) -> None:
        self._storage = storage
        self._writer = writer
        self._timeout = timeout
        self._reuse = reuse
        self._answer: ProbeAnswer | None = None
        self._answered_at = -math.inf
        self._running: _Run | None = None

    async def check(self, nursery: trio.Nursery | None) -> ProbeAnswer:
        """The storage's state, in at most ``timeout`` seconds. The read runs in
        ``nursery`` (the server's), so a client that leaves does not end it;
        without one it runs here and is given up at the bound."""
        stuck = self._writer_problem()
        if stuck is not None:
            return ProbeAnswer(error=stuck)
        now = trio.current_time()
        if self._running is None and now - self._answered_at < self._reuse:
            assert self._answer is not None
            return self._answer
        if nursery is not None:
            run = self._running or self._start(nursery, now)
            with trio.move_on_at(run.began + self._timeout):
                await run.done.wait()
            return self._outcome(run)
        async with trio.open_nursery() as own:
            run = self._running or self._start(own, now)
            with trio.move_on_at(run.began + self._timeout):
                await run.done.wait()
            answer = self._outcome(run)
            own.cancel_scope.cancel()
        return answer

    def _writer_problem(self) -> str | None:
        stats = self._writer()
        if stats is None:
            return None
        if not stats.running:
            return "the storage writer has stopped: no write can be stored"
        if stats.busy_seconds > self._timeout:
            return f"the storage has not finished a commit for {stats.busy_seconds:.1f} s"
        return None

    def _start(self, nursery: trio.Nursery, now: float) -> _Run:
        run = self._running = _Run(now)
        nursery.start_soon(self._probe, run)
        return run

    def _outcome(self, run: _Run) -> ProbeAnswer:
        if run.done.is_set() and self._answer is not None:
            return self._answer
        waited = trio.current_time() - run.began
        return ProbeAnswer(error=f"the storage has not answered a read for {waited:.1f} s")

    async def _probe(self, run: _Run) -> None:
        answer: ProbeAnswer | None = None
        try:
            try:
                await self._read()
            except Exception as error:  # whatever the storage raises is the answer
                answer = ProbeAnswer(error=f"{type(error).__name__}: {error}")
            else:
                took = trio.current_time() - run.began
                answer = (
                    ProbeAnswer(ms=round(took * 1000, 3))
                    if took <= self._timeout
                    # Answered, but later than a check waits: as slow as a hang to a client.
                    else ProbeAnswer(error=f"the storage took {took:.1f} s to answer a read")
                )
        finally:
            if answer is not None:  # (None: cancelled, the server is stopping)
                self._answer = answer
                self._answered_at = trio.current_time()
            self._running = None
            run.done.set()

    async def _read(self) -> None:
        await self._read_conversation()
        stats = self._writer()
        secrets = self._storage.secret_store
        if stats is None or secrets is None or stats.read_only or not stats.running:
            return
        if stats.failing:
            # Writes failed and none has committed since: try one, as the next
            # turn would. Without it a node a load balancer took out (no more
            # turns) would stay failing after the storage recovered.
            await secrets.put_secret(PROBE_RECORD, datetime.now(UTC).isoformat())

    async def _read_conversation(self) -> None:
        store = self._storage.message_store
        await store.load_conversation(PROBE_CONVERSATION, page_size=1)
