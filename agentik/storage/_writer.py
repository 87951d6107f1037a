"""The writer task: the only code that writes, through the only write connection.

Backend-neutral: SQLite (``sqlite/_writer.py``) and PostgreSQL
(``postgres/_writer.py``) each supply an ``Engine`` that runs one batch in one
transaction in a worker thread; everything around it is here, once.

Callers put requests on a bounded queue (``RequestQueue``: a trio memory
channel that hands out a batch at once; waiting for room is the
backpressure). The writer takes what is queued, up to ``max_batch``, and hops
to a worker thread once for the whole batch: one transaction, one COMMIT
(group commit). Back on the event loop it resolves each request's ``Pending``.

Invariants:
- a request is resolved exactly once: with its value after the COMMIT
  returned, or with its own error (the engine rolled back its savepoint and
  its batch-mates still commit), or with ``StoreClosedError`` when the writer
  stopped before running it;
- the thread hop and the wake-ups run shielded, so cancellation can never
  separate a commit from its acknowledgement; but a cancelled writer tells
  its engine to stop waiting for the database (``Engine.interrupt``), so a
  server that never answers cannot hold the cancellation: the batch fails
  (in doubt if its COMMIT was under way), and its callers are told so;
- requests run in queue order, so one task's writes apply in the order it
  submitted them;
- if the database cannot commit a transaction (a lock held past the busy
  timeout, an I/O error, a full disk, a connection lost), or an error ends the
  transaction early, the engine raises ``BatchFailed``: every request of that
  batch fails with a ``StoreError`` saying so, nothing of it is written (but
  for a COMMIT in doubt: ``CommitInDoubt``, written whole or not at all), and
  the writer goes on with the next batch; the requests of the batch's
  conversations already queued behind it fail too, unrun: a conversation's
  writes depend on the ones before (a turn's answer on its call's result), so
  what is committed of a conversation is what it submitted up to a point;
- if the writer itself breaks (any other exception: a bug), it dies: every
  request in flight or queued fails with ``StoreClosedError``, and every later
  submission is refused with the same cause;
- the storage is *failing* (``WriterStats.failing``, what ``/health`` reports)
  from a write that fails for a reason of the storage (the engine says which,
  in ``Outcome.fault``, or a whole batch failed) until a write commits again,
  and for good once the writer died; a database opened read-only is failing
  from the start. A request refused for its own sake (a constraint, a reused
  key) changes nothing: it says nothing about the storage.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Generic, Protocol, TypeVar, cast, final

import attrs
import trio

from agentik._errors import CommitInDoubt, StoreClosedError, StoreError
from agentik._messages import Message
from agentik._sync import Pending
from agentik.storage._common import Clock
from agentik.storage._queue import RequestQueue
from agentik.storage._rows import MessageRow

T = TypeVar("T")
S = TypeVar("S", bound="MessageSession")
S_contra = TypeVar("S_contra", contravariant=True)


@attrs.frozen
class WriterStats:
    """A snapshot of the writer's counters, for metrics."""

    running: bool
    """False once the bundle closed or the writer died."""
    batches: int
    """Transactions committed."""
    writes: int
    """Requests committed."""
    failed_writes: int
    """Requests that failed: on their own (their batch-mates committed), or
    with their whole batch."""
    failed_batches: int
    """Transactions the database could not commit (lock, I/O error, full disk,
    lost connection); the writer went on serving."""
    last_batch_size: int
    largest_batch_size: int
    queue_depth: int
    """Requests waiting for the writer: queued, plus callers waiting for room."""
    queue_capacity: int
    failing: bool = False
    """Writes are failing for a reason of the storage: the last write that
    reached the database failed so (read-only database, I/O error, full disk,
    a lock held past ``busy_timeout``, the server unreachable) and none has
    committed since, or the database was opened read-only, or the writer died."""
    last_error: str | None = None
    """The latest such error (``ReadOnlyError: attempt to write a readonly
    database``), kept after writes recover; None if there was none."""
    last_error_at: datetime | None = None
    """When ``last_error`` happened (the bundle's clock)."""
    read_only: bool = False
    """The database was opened read-only: every write fails, for as long as it is open."""
    busy_seconds: float = 0.0
    """How long the batch under way has been in the database (trio's clock),
    0.0 while the writer waits for work: a writer stuck on a database that
    stopped answering shows here before any write fails."""


class Work(Protocol[S_contra]):
    """A queued request, as an engine runs it (in the writer's thread)."""

    @property
    def conversation_id(self) -> str | None:
        """The conversation the write belongs to, if any."""
        ...

    def run(self, session: S_contra) -> None: ...
    def fail(self, error: BaseException) -> None: ...
    def resolve(self) -> None: ...


class MessageSession(Protocol):
    """What an append request needs of a backend's session: insert one row."""

    def insert_message(self, row: MessageRow) -> Message: ...


@final
class Request(Generic[S, T]):
    """One write: the operation, then (set in the thread) its result."""

    __slots__ = ("_error", "_operation", "_value", "conversation_id", "pending")

    def __init__(self, operation: Callable[[S], T], conversation_id: str | None = None) -> None:
        self._operation = operation
        self.conversation_id = conversation_id
        self._value: T | None = None
        self._error: BaseException | None = None
        self.pending: Pending[T] = Pending()

    def run(self, session: S) -> None:
        self._value = self._operation(session)

    def fail(self, error: BaseException) -> None:
        self._error = error

    def resolve(self) -> None:
        if self._error is not None:
            self.pending.set_error(self._error)
        else:
            self.pending.set_value(cast("T", self._value))


@final
class AppendRequest(MessageRow):
    """A message append: the common write, which engines insert in runs
    (setting ``stored_message`` themselves) or one at a time (``run``)."""

    __slots__ = ("_error", "pending", "stored_message")

    def __init__(self, conversation_id: str, message: Message, idempotency_key: str | None) -> None:
        MessageRow.__init__(self, conversation_id, message, idempotency_key)
        self.stored_message: Message | None = None
        self._error: BaseException | None = None
        self.pending: Pending[Message] = Pending()

    def run(self, session: MessageSession) -> None:
        self.stored_message = session.insert_message(self)

    def fail(self, error: BaseException) -> None:
        self._error = error

    def resolve(self) -> None:
        if self._error is not None:
            self.pending.set_error(self._error)
        else:
            assert self.stored_message is not None
            self.pending.set_value(self.stored_message)


class BatchFailed(Exception):
    """Raised by an engine: the batch's transaction failed as a whole (could
    not begin or commit, or an error ended it early); nothing of it was
    written, unless ``doubt`` says it may have been. The cause is chained
    (``raise BatchFailed(...) from cause``)."""

    def __init__(self, *, doubt: str | None = None) -> None:
        super().__init__()
        self.doubt = doubt
        """Why the batch may have been committed after all, nobody able to tell
        the writer which (``LOST_IN_COMMIT``; SQLite: a write-ahead log written
        but not synced); None when nothing of it was written."""


LOST_IN_COMMIT = "the connection was lost during COMMIT"


def as_store_error(error: Exception) -> StoreError:
    if isinstance(error, StoreError):
        return error
    failure = StoreError(f"storage write failed: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure


@attrs.define
class Outcome:
    """What a batch's requests did, for the counters and the storage's health."""

    failed: int = 0
    """Requests that failed alone (their batch-mates committed)."""
    fault: Exception | None = None
    """The last of those failures that was the storage's, not the request's."""

    def add(self, error: Exception | None, *, fault: bool) -> None:
        if error is not None:
            self.failed += 1
            if fault:
                self.fault = error


class Engine(Protocol[S]):
    """A backend's half of the writer: one batch, one transaction."""

    def run_batch(self, batch: list[Work[S]]) -> Outcome:
        """Run every request of ``batch`` in one transaction, each in its own
        savepoint (a failing request is ``fail``-ed and rolled back alone), and
        commit; in a worker thread. Raise ``BatchFailed`` if the transaction
        as a whole failed: then nothing of it was written."""
        ...

    def interrupt(self) -> None:
        """From the event loop, once the writer is cancelled: the batch under
        way, if any, and any after it, must stop waiting for the database
        soon (a call still waiting then fails its batch)."""
        ...


MAX_BATCH = 10_000
"""The default most requests one transaction commits: a burst of 5,000 turns'
first two messages commit together (in the worker thread on SQLite; in one
statement on PostgreSQL)."""

QUEUE_SIZE = 40_000
"""The default requests the writer's queue holds before callers wait: 10,000
turns in lockstep, four messages each (user, call, result, answer) before
they wait for their commit, fit without waiting for room. Full, every
further message parks its conversation's task until the writer takes a
batch, and wakes it alone: at 10,000 conversations the old 4,000 (with
batches of 2,000) cost a quarter more CPU a turn (``bench.turns -n 10000``).
The bound is on memory only: a queued request holds a message the
conversation's history holds anyway, plus ~0.3 KiB (measured with tracemalloc)."""


@final
class Writer(Generic[S]):
    """Owns the engine (and so the write connection) and the request queue;
    ``run`` is the task."""

    def __init__(
        self,
        engine: Engine[S],
        *,
        clock: Clock,
        max_batch: int,
        queue_size: int,
        read_only: bool = False,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._max_batch = max_batch
        self._queue_capacity = queue_size
        self._queue: RequestQueue[Work[S]] = RequestQueue(queue_size)
        self._thread = trio.CapacityLimiter(1)
        self._closed = False
        self._failure: Exception | None = None
        self._batches = self._writes = self._failed = self._last = self._largest = 0
        self._failed_batches = 0
        self._failing = False
        self._last_error: str | None = None
        self._last_error_at: datetime | None = None
        self._batch_began: float | None = None
        self._doomed: dict[str, StoreError] = {}
        """Conversations a failed batch held: their requests queued behind it fail."""
        self._doomed_left = 0
        """How many requests were queued behind the last failed batch, still to take."""
        self._read_only = read_only
        self._stopping = False
        """The loop ended by itself: its helper's cancellation is not the writer's."""
        if read_only:
            self._record_fault("the database is read-only: every write will fail")

    async def submit(
        self, operation: Callable[[S], T], *, conversation_id: str | None = None
    ) -> Pending[T]:
        """Queue one write; return once it is accepted (there was room).
        ``conversation_id``: the conversation it belongs to (see ``_doom``)."""
        request: Request[S, T] = Request(operation, conversation_id)
        await self._enqueue(request, schedule=True)
        return request.pending

    async def write(self, operation: Callable[[S], T]) -> T:
        """Submit and wait for the commit."""
        request: Request[S, T] = Request(operation)
        await self._enqueue(request, schedule=False)
        return await request.pending.wait()

    async def submit_append(
        self, conversation_id: str, message: Message, idempotency_key: str | None
    ) -> Pending[Message]:
        request = AppendRequest(conversation_id, message, idempotency_key)
        await self._enqueue(request, schedule=True)
        return request.pending

    def submit_append_nowait(
        self, conversation_id: str, message: Message
    ) -> Pending[Message] | None:
        """``submit_append`` if there is room now (no checkpoint: it is not
        async); None if the caller must await it, having queued nothing."""
        self._check_open()
        request = AppendRequest(conversation_id, message, None)
        if not self._queue.put_nowait(request):
            return None
        return request.pending

    async def append(
        self, conversation_id: str, message: Message, idempotency_key: str | None
    ) -> Message:
        """Submit an append and wait for the commit (the wait is its checkpoint)."""
        request = AppendRequest(conversation_id, message, idempotency_key)
        await self._enqueue(request, schedule=False)
        return await request.pending.wait()

    async def _enqueue(self, request: Work[S], *, schedule: bool) -> None:
        """Put ``request`` on the queue, waiting only if it is full.

        A cancelled caller raises before anything is queued. When there is
        room, the request goes in without a task switch; ``schedule`` adds one
        afterwards (``submit`` keeps trio's rule that every async call is a
        schedule point; ``write`` gets its switch from waiting for the commit).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if not self._queue.put_nowait(request):
            await self._wait_for_room(request)
        elif schedule:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _wait_for_room(self, request: Work[S]) -> None:
        try:
            await self._queue.put(request)
        except trio.ClosedResourceError:
            self._check_open()
            raise StoreClosedError("the storage writer stopped; the write was refused") from None

    def _check_open(self) -> None:
        if self._failure is not None:
            raise StoreClosedError(
                f"the storage writer died ({type(self._failure).__name__}: {self._failure});"
                " no more writes are accepted"
            ) from self._failure
        if self._closed:
            raise StoreClosedError("the storage bundle is closed; no more writes are accepted")

    def close(self) -> None:
        """Accept nothing more; the writer drains what was accepted, then stops."""
        self._closed = True
        self._queue.close()

    def stats(self) -> WriterStats:
        return WriterStats(
            running=not self._closed and self._failure is None,
            batches=self._batches,
            writes=self._writes,
            failed_writes=self._failed,
            failed_batches=self._failed_batches,
            last_batch_size=self._last,
            largest_batch_size=self._largest,
            queue_depth=len(self._queue),
            queue_capacity=self._queue_capacity,
            failing=self._failing or self._failure is not None,
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            read_only=self._read_only,
            busy_seconds=0.0
            if self._batch_began is None
            else trio.current_time() - self._batch_began,
        )

    def _record_fault(self, text: str) -> None:
        self._failing = True
        self._last_error = text
        self._last_error_at = self._clock()

    async def run(self) -> None:
        """Commit batches until the queue closes and drains (or the writer dies)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._interrupt_when_cancelled)
                while batch := await self._queue.take(self._max_batch):
                    if self._doomed_left:
                        batch = self._drop_doomed(batch)
                        if not batch:
                            continue
                    with trio.CancelScope(shield=True):
                        self._batch_began = trio.current_time()
                        try:
                            going = await self._commit(batch)
                        finally:
                            self._batch_began = None
                        if not going:
                            break
                self._stopping = True
                nursery.cancel_scope.cancel()
        finally:
            self._stop()

    async def _interrupt_when_cancelled(self) -> None:
        """Sleeps beside the loop; its cancellation is the writer's (the loop
        is shielded while a batch runs), and then the engine must stop
        waiting for the database: otherwise a server that never answers
        would hold the cancellation for as long as its own bound allows."""
        try:
            await trio.sleep_forever()
        finally:
            if not self._stopping:
                self._engine.interrupt()

    async def _commit(self, batch: list[Work[S]]) -> bool:
        try:
            outcome = await trio.to_thread.run_sync(
                self._engine.run_batch, batch, limiter=self._thread
            )
        except BatchFailed as error:
            # The database could not commit (a lock held past busy_timeout, an
            # I/O error, a full disk, a lost connection), or lost the
            # transaction on the way: nothing of the batch was written, unless
            # the engine says it is in doubt. Its callers hear which; the
            # writer goes on, so writes work again once the cause clears.
            cause = error.__cause__ or error
            failure = (
                StoreError(
                    f"the write was not committed: its batch failed ({type(cause).__name__}:"
                    f" {cause}); nothing of the batch was written"
                )
                if error.doubt is None
                else CommitInDoubt(
                    f"the write's outcome is unknown: {error.doubt}"
                    f" ({type(cause).__name__}: {cause}); the batch may have been written"
                )
            )
            failure.__cause__ = cause
            for request in batch:
                request.fail(failure)
                request.resolve()
            self._doom(batch, cause)
            self._failed_batches += 1
            self._failed += len(batch)
            self._record_fault(f"{type(cause).__name__}: {cause}")
            return True
        except Exception as error:  # a bug: the writer cannot be trusted any more
            self._failure = error
            self._record_fault(f"the storage writer died: {type(error).__name__}: {error}")
            for request in batch:
                request.fail(self._died_error())
                request.resolve()
            return False
        for request in batch:
            request.resolve()
        failed = outcome.failed
        if outcome.fault is not None:
            self._record_fault(f"{type(outcome.fault).__name__}: {outcome.fault}")
        elif failed < len(batch):
            self._failing = False  # a write committed: the storage takes writes again
        self._batches += 1
        self._writes += len(batch) - failed
        self._failed += failed
        self._last = len(batch)
        self._largest = max(self._largest, len(batch))
        return True

    def _doom(self, batch: list[Work[S]], cause: BaseException) -> None:
        """The requests of ``batch``'s conversations queued behind it will fail
        unrun: a conversation's later write may depend on one that failed (a
        turn's answer on its call's result), and its writer learns of the
        failure only once it waits; committed without it, it would leave a
        hole in the stored conversation. (What a conversation submits once
        the failure is reported is its own to hold back: ``TurnWrites``.)"""
        for request in batch:
            conversation_id = request.conversation_id
            if conversation_id is not None:
                failure = StoreError(
                    f"the write was not committed: a write of conversation {conversation_id!r}"
                    f" queued before it failed ({type(cause).__name__}: {cause}); nothing of it"
                    " was written"
                )
                failure.__cause__ = cause
                self._doomed[conversation_id] = failure
        self._doomed_left = len(self._queue)
        if not self._doomed_left:
            self._doomed.clear()

    def _drop_doomed(self, batch: list[Work[S]]) -> list[Work[S]]:
        """``batch`` less the requests of doomed conversations queued behind a
        failed batch, which fail unrun."""
        behind, self._doomed_left = self._doomed_left, max(0, self._doomed_left - len(batch))
        kept: list[Work[S]] = []
        for at, request in enumerate(batch):
            conversation_id = request.conversation_id
            error = None
            if at < behind and conversation_id is not None:
                error = self._doomed.get(conversation_id)
            if error is None:
                kept.append(request)
            else:
                request.fail(error)
                request.resolve()
                self._failed += 1
        if not self._doomed_left:
            self._doomed.clear()
        return kept

    def _died_error(self) -> StoreClosedError:
        error = StoreClosedError(
            f"the storage writer died ({type(self._failure).__name__}: {self._failure});"
            " the write was not committed"
        )
        error.__cause__ = self._failure
        return error

    def _stop(self) -> None:
        """Fail whatever is still queued and close the queue. Synchronous, so
        nothing can slip in between the drain and the close."""
        self._closed = True
        for request in self._queue.drain():
            request.fail(
                self._died_error()
                if self._failure is not None
                else StoreClosedError("the storage writer stopped before this write ran")
            )
            request.resolve()
