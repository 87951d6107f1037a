"""A small pool of read connections, used from worker threads; the reads
queued at once share one thread hop.

Reads queue up; one task per connection takes what is queued (at most
``max_batch``) and runs it in one worker-thread hop, each query on its own
(the reads of one kind that ``read_together`` sends, in one call for all of
them), then wakes each caller with its own result or error. The thread hop is
what a read costs the event loop, not the query: 1,000 conversations opening
at once made 1,000 hops through four threads and spent about 300 µs of CPU
on each empty history read, where the three queries take 26 µs
(docs/performance.md, "The speed budget"; measured in
docs/history/performance-log.md, "Group reads"). Taken together, a burst of
reads costs a few hops.

Each read is one short read (SQLite: a read transaction on a WAL connection;
PostgreSQL: one statement or one read-only transaction) and sees every commit
acknowledged before it was queued. The pool does not know what a connection
is: the backend hands it its connections (or holders that reconnect) and the
queries that take them.

A caller cancelled while its read waits leaves the queue's order alone: the
read is skipped if it has not started, and its result dropped if it has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, final

import trio

from agentik._errors import StoreClosedError
from agentik._sync import Pending
from agentik.storage._queue import RequestQueue

C = TypeVar("C")
T = TypeVar("T")
A = TypeVar("A")

MAX_BATCH = 32
"""Reads one hop runs at most: enough to collapse a burst, few enough that a
slow read holds up only the reads queued right behind it (and the other
connections go on serving)."""


class Runner(Protocol[C]):
    """Runs a query on a connection in the worker thread, replacing the
    connection if it broke (a server restarted); returns the result and the
    connection to keep."""

    def __call__(self, query: Callable[[C], T], connection: C) -> tuple[T, C]: ...


Group = Callable[[C, list[A]], list[T]]
"""Runs several reads of one kind at once: their arguments in, their results
out, in the same order (``ReaderPool.read_together``)."""


@final
class _Read(Generic[C, T]):
    """One queued read: the query (or a group and its argument), then (set in
    the thread) its result."""

    __slots__ = ("abandoned", "argument", "error", "group", "pending", "query", "value")

    def __init__(
        self,
        query: Callable[[C], T] | None,
        group: Group[C, object, T] | None = None,
        argument: object = None,
    ) -> None:
        self.query = query
        self.group = group
        self.argument = argument
        self.value: T | None = None
        self.error: BaseException | None = None
        self.abandoned = False
        """Its caller stopped waiting: a read not yet started is skipped."""
        self.pending: Pending[T] = Pending()

    def resolve(self) -> None:
        if self.error is not None:
            self.pending.set_error(self.error)
        else:
            self.pending.set_value(self.value)  # type: ignore[arg-type]


@final
class ReaderPool(Generic[C]):
    def __init__(
        self, connections: list[C], runner: Runner[C] | None = None, *, max_batch: int = MAX_BATCH
    ) -> None:
        self.connections = list(connections)
        """Every connection of the pool (the bundle closes them)."""
        self._runner = runner
        self._max_batch = max_batch
        self._queue: RequestQueue[_Read[C, object]] = RequestQueue(math.inf)  # type: ignore[arg-type]
        self._closed = False
        self.hops = 0
        """Thread hops taken so far (each ran one batch of reads)."""

    async def read(self, query: Callable[[C], T]) -> T:
        """Run ``query`` on a connection in a worker thread; its result or error."""
        return await self._read(_Read(query))

    async def read_together(self, group: Group[C, A, T], argument: A) -> T:
        """Like ``read``, for reads of one kind that a burst makes many of (a
        conversation's history when thousands start at once): those that share
        a thread hop are run by one call of ``group`` with all their
        arguments, so a backend can answer them with one statement. If that
        call fails, each runs alone, so an error is its own read's."""
        return await self._read(_Read(None, group, argument))  # type: ignore[arg-type]

    async def _read(self, job: _Read[C, T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise StoreClosedError("the storage bundle is closed; no more reads are possible")
        self._queue.put_nowait(job)  # type: ignore[arg-type]  # unbounded: always room
        try:
            return await job.pending.wait()
        finally:
            if not job.pending.done:
                job.abandoned = True

    async def run(self) -> None:
        """Serve reads, one task per connection, until ``refuse`` and the queue
        drains. Never raises: a query's error goes to its caller. Cancelled
        (the bundle's body failed), it stops after the hops under way, and
        the reads still queued fail with ``StoreClosedError`` rather than wait
        for ever."""
        try:
            async with trio.open_nursery() as nursery:
                for slot in range(len(self.connections)):
                    nursery.start_soon(self._serve, slot)
        finally:
            self._closed = True
            for job in self._queue.drain():
                job.error = StoreClosedError("the storage bundle closed before this read ran")
                job.resolve()

    async def _serve(self, slot: int) -> None:
        while batch := await self._queue.take(self._max_batch):
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._run_batch, slot, batch)
                self.hops += 1
                for job in batch:
                    if not job.abandoned:
                        job.resolve()

    def _run_batch(self, slot: int, batch: list[_Read[C, object]]) -> None:
        """In the worker thread: each read of ``batch`` in turn, on ``slot``'s
        connection; the reads of a group together, after the others."""
        groups: dict[Group[C, object, object], list[_Read[C, object]]] = {}
        for job in batch:
            if job.abandoned:
                continue
            if job.group is not None:
                groups.setdefault(job.group, []).append(job)
                continue
            assert job.query is not None
            try:
                job.value = self._run(slot, job.query)
            except BaseException as error:  # the caller's to raise, whatever it is
                job.error = error
        for group, jobs in groups.items():
            self._run_group(slot, group, jobs)

    def _run_group(
        self, slot: int, group: Group[C, object, object], jobs: list[_Read[C, object]]
    ) -> None:
        arguments = [job.argument for job in jobs]
        try:
            results = self._run(slot, lambda connection: group(connection, arguments))
            if len(results) != len(jobs):
                raise RuntimeError(f"a group of {len(jobs)} reads gave {len(results)} results")
        except BaseException as error:
            if len(jobs) == 1:
                jobs[0].error = error
                return
            for job in jobs:  # each alone: the failing one fails by itself
                self._run_group(slot, group, [job])
            return
        for job, value in zip(jobs, results, strict=True):
            job.value = value

    def _run(self, slot: int, query: Callable[[C], T]) -> T:
        runner = self._runner
        if runner is None:
            return query(self.connections[slot])
        result, self.connections[slot] = runner(query, self.connections[slot])
        return result

    def refuse(self) -> None:
        """Refuse reads from now on; what is queued still runs, then the tasks
        stop and the bundle closes the connections."""
        self._closed = True
        self._queue.close()
