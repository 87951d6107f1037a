"""The writer task: the only code that writes, through the only write connection.

Callers put requests on a bounded queue (``RequestQueue``: a trio memory
channel's semantics, minus its per-item costs; waiting for room is the
backpressure). The writer takes what is queued, up to ``max_batch``, and hops
to a worker thread once for the whole batch: one IMMEDIATE transaction, one
COMMIT (group commit). Back on the event loop it resolves each request's
``Pending``.

Inside the transaction a run of consecutive message appends is inserted at
once, with a few multi-row INSERT statements inside one SAVEPOINT; any other
request runs in its own SAVEPOINT. If a run fails, its savepoint is rolled back
and its appends are replayed one by one, each in its own savepoint, so the
failing one fails alone.

Invariants:
- a request is resolved exactly once: with its value after the COMMIT
  returned, or with its own error (its savepoint was rolled back and its
  batch-mates still commit), or with ``StoreClosedError`` when the writer
  stopped before running it;
- the thread hop and the wake-ups run shielded, so cancellation can never
  separate a commit from its acknowledgement;
- requests run in queue order, so one task's writes apply in the order it
  submitted them;
- if SQLite cannot commit a transaction (a lock held past the busy timeout, an
  I/O error, a full disk), or an error ends the transaction early, every
  request of that batch fails with a ``StoreError`` saying so, nothing of it
  is written, and the writer goes on with the next batch;
- if the writer itself breaks (any other exception: a bug), it dies: every
  request in flight or queued fails with ``StoreClosedError``, and every later
  submission is refused with the same cause;
- the storage is *failing* (``WriterStats.failing``, what ``/health`` reports)
  from a write that fails for a reason of the storage (``_STORAGE_FAULTS``, or
  a batch SQLite could not commit) until a write commits again, and for good
  once the writer died; a database opened read-only is failing from the start.
  A request refused for its own sake (a constraint, a reused key) changes
  nothing: it says nothing about the storage.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Generic, Protocol, TypeVar, cast, final

import apsw
import attrs
import trio

from agentik._errors import StoreClosedError, StoreError
from agentik._messages import Message
from agentik.storage._common import Clock, to_micros
from agentik.storage._pending import Pending
from agentik.storage.sqlite._queries import InsertMessage, SeqCache, Session, insert_messages
from agentik.storage.sqlite._queue import RequestQueue

T = TypeVar("T")

# A request's own failure: a constraint, a value SQLite or the encoder refuses,
# an ``agentik`` error raised on purpose. Anything else is a bug and kills the writer.
_REQUEST_ERRORS = (apsw.Error, StoreError, ValueError, TypeError, OverflowError)

# Errors of the storage rather than of the request: every other write would
# fail the same way, so they make the storage "failing" (``WriterStats.failing``).
_STORAGE_FAULTS = (
    apsw.ReadOnlyError,
    apsw.IOError,
    apsw.FullError,
    apsw.CorruptError,
    apsw.NotADBError,
    apsw.CantOpenError,
    apsw.BusyError,
    apsw.LockedError,
    apsw.NoMemError,
    apsw.PermissionsError,
    apsw.ProtocolError,
)


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
    """Transactions SQLite could not commit (lock, I/O error, full disk); the
    writer went on serving."""
    last_batch_size: int
    largest_batch_size: int
    queue_depth: int
    """Requests waiting for the writer: queued, plus callers waiting for room."""
    queue_capacity: int
    failing: bool = False
    """Writes are failing for a reason of the storage: the last write that
    reached SQLite failed so (read-only database, I/O error, full disk, a lock
    held past ``busy_timeout``) and none has committed since, or the database
    was opened read-only, or the writer died."""
    last_error: str | None = None
    """The latest such error (``ReadOnlyError: attempt to write a readonly
    database``), kept after writes recover; None if there was none."""
    last_error_at: datetime | None = None
    """When ``last_error`` happened (the bundle's clock)."""


class _Work(Protocol):
    def run(self, session: Session) -> None: ...
    def fail(self, error: BaseException) -> None: ...
    def resolve(self) -> None: ...


@final
class _Request(Generic[T]):
    """One write: the operation, then (set in the thread) its result."""

    __slots__ = ("_error", "_operation", "_value", "pending")

    def __init__(self, operation: Callable[[Session], T]) -> None:
        self._operation = operation
        self._value: T | None = None
        self._error: BaseException | None = None
        self.pending: Pending[T] = Pending()

    def run(self, session: Session) -> None:
        self._value = self._operation(session)

    def fail(self, error: BaseException) -> None:
        self._error = error

    def resolve(self) -> None:
        if self._error is not None:
            self.pending.set_error(self._error)
        else:
            self.pending.set_value(cast("T", self._value))


@final
class _AppendRequest(InsertMessage):
    """A message append: the common write, which the batch inserts in runs."""

    __slots__ = ("_error", "_stored", "pending")

    def __init__(self, conversation_id: str, message: Message, idempotency_key: str | None) -> None:
        InsertMessage.__init__(self, conversation_id, message, idempotency_key)
        self._stored: Message | None = None
        self._error: BaseException | None = None
        self.pending: Pending[Message] = Pending()

    def run(self, session: Session) -> None:
        self._stored = self(session)

    def fail(self, error: BaseException) -> None:
        self._error = error

    def resolve(self) -> None:
        if self._error is not None:
            self.pending.set_error(self._error)
        else:
            assert self._stored is not None
            self.pending.set_value(self._stored)


class _TransactionLost(Exception):
    """An error ended the transaction early (SQLite rolls it back by itself on
    some I/O, full-disk and out-of-memory errors): the batch fails as a whole."""


def _as_store_error(error: Exception) -> StoreError:
    if isinstance(error, StoreError):
        return error
    failure = StoreError(f"storage write failed: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure


def _check_transaction(connection: apsw.Connection, error: Exception) -> None:
    if not connection.in_transaction:
        raise _TransactionLost(f"{type(error).__name__}: {error}") from error


def _try_appends_at_once(session: Session, run: list[_AppendRequest]) -> bool:
    """Insert a run of appends in one savepoint. On any failure roll it back
    and return False: the caller replays them one by one, so the failing
    request fails alone."""
    try:
        with session.connection:
            insert_messages(session, run)
    except _REQUEST_ERRORS as error:
        session.seqs.undo()
        _check_transaction(session.connection, error)
        return False
    session.seqs.keep()
    now = session.now
    for request in run:
        request._stored = request.stored(now)
    return True


def _run_one(session: Session, request: _Work) -> Exception | None:
    """Run one request in its own savepoint; return its error if it failed."""
    try:
        with session.connection:  # inside a transaction: a SAVEPOINT
            request.run(session)
    except _REQUEST_ERRORS as error:
        session.seqs.undo()
        _check_transaction(session.connection, error)
        request.fail(_as_store_error(error))
        return error
    session.seqs.keep()
    return None


@attrs.define
class _Outcome:
    """What a batch's requests did, for the counters and the storage's health."""

    failed: int = 0
    """Requests that failed alone (their batch-mates committed)."""
    fault: Exception | None = None
    """The last of those failures that was the storage's (``_STORAGE_FAULTS``)."""

    def add(self, error: Exception | None) -> None:
        if error is not None:
            self.failed += 1
            if isinstance(error, _STORAGE_FAULTS):
                self.fault = error


def _run_requests(session: Session, batch: list[_Work]) -> _Outcome:
    """Every request of the batch, runs of appends at once."""
    outcome = _Outcome()
    position, total = 0, len(batch)
    while position < total:
        end = position
        while end < total and type(batch[end]) is _AppendRequest:
            end += 1
        if end - position > 1:
            whole = end - position == total
            run = cast("list[_AppendRequest]", batch if whole else batch[position:end])
            if not _try_appends_at_once(session, run):
                for request in run:
                    outcome.add(_run_one(session, request))
            position = end
        else:
            outcome.add(_run_one(session, batch[position]))
            position += 1
    return outcome


def _run_batch(
    connection: apsw.Connection, seqs: SeqCache, clock: Clock, batch: list[_Work]
) -> _Outcome:
    """One transaction for the whole batch; return what its requests did. Runs
    in a worker thread; raises only if the transaction itself fails."""
    now = clock()
    session = Session(connection=connection, seqs=seqs, now_us=to_micros(now), now=now)
    committed = False
    # BEGIN and COMMIT go through execute(), which releases the GIL while SQLite
    # waits for a lock or syncs; apsw's outermost ``with connection:`` holds it
    # through the busy handler and would freeze the event loop meanwhile.
    connection.execute("BEGIN IMMEDIATE")
    try:
        outcome = _run_requests(session, batch)
        connection.execute("COMMIT")
        committed = True
    finally:
        if not committed:
            seqs.clear()
            if connection.in_transaction:
                connection.execute("ROLLBACK")
    return outcome


@final
class Writer:
    """Owns the write connection and the request queue; ``run`` is the task."""

    def __init__(
        self, connection: apsw.Connection, *, clock: Clock, max_batch: int, queue_size: int
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._max_batch = max_batch
        self._queue_capacity = queue_size
        self._queue: RequestQueue[_Work] = RequestQueue(queue_size)
        self._seqs = SeqCache()
        self._thread = trio.CapacityLimiter(1)
        self._closed = False
        self._failure: Exception | None = None
        self._batches = self._writes = self._failed = self._last = self._largest = 0
        self._failed_batches = 0
        self._failing = False
        self._last_error: str | None = None
        self._last_error_at: datetime | None = None
        if connection.readonly("main"):
            self._record_fault("the database is read-only: every write will fail")

    async def submit(self, operation: Callable[[Session], T]) -> Pending[T]:
        """Queue one write; return once it is accepted (there was room)."""
        request = _Request(operation)
        await self._enqueue(request, schedule=True)
        return request.pending

    async def write(self, operation: Callable[[Session], T]) -> T:
        """Submit and wait for the commit."""
        request = _Request(operation)
        await self._enqueue(request, schedule=False)
        return await request.pending.wait()

    async def submit_append(
        self, conversation_id: str, message: Message, idempotency_key: str | None
    ) -> Pending[Message]:
        request = _AppendRequest(conversation_id, message, idempotency_key)
        await self._enqueue(request, schedule=True)
        return request.pending

    def submit_append_nowait(
        self, conversation_id: str, message: Message
    ) -> Pending[Message] | None:
        """``submit_append`` if there is room now (no checkpoint: it is not
        async); None if the caller must await it, having queued nothing."""
        self._check_open()
        request = _AppendRequest(conversation_id, message, None)
        if not self._queue.put_nowait(request):
            return None
        return request.pending

    async def append(
        self, conversation_id: str, message: Message, idempotency_key: str | None
    ) -> Message:
        """Submit an append and wait for the commit (the wait is its checkpoint)."""
        request = _AppendRequest(conversation_id, message, idempotency_key)
        await self._enqueue(request, schedule=False)
        return await request.pending.wait()

    async def _enqueue(self, request: _Work, *, schedule: bool) -> None:
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

    async def _wait_for_room(self, request: _Work) -> None:
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
        )

    def _record_fault(self, text: str) -> None:
        self._failing = True
        self._last_error = text
        self._last_error_at = self._clock()

    async def run(self) -> None:
        """Commit batches until the queue closes and drains (or the writer dies)."""
        try:
            while batch := await self._queue.take(self._max_batch):
                with trio.CancelScope(shield=True):
                    if not await self._commit(batch):
                        return
        finally:
            self._stop()

    async def _commit(self, batch: list[_Work]) -> bool:
        try:
            outcome = await trio.to_thread.run_sync(
                _run_batch, self._connection, self._seqs, self._clock, batch, limiter=self._thread
            )
        except (apsw.Error, _TransactionLost) as error:
            # SQLite could not commit (a lock held past busy_timeout, an I/O
            # error, a full disk), or lost the transaction on the way: nothing
            # of the batch was written. Its callers hear why; the writer goes
            # on, so writes work again once the cause clears.
            cause = error.__cause__ if isinstance(error, _TransactionLost) else error
            failure = StoreError(
                f"the write was not committed: its batch failed ({type(cause).__name__}:"
                f" {cause}); nothing of the batch was written"
            )
            failure.__cause__ = cause
            for request in batch:
                request.fail(failure)
                request.resolve()
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
