"""The writer task: the only code that writes, through the only write connection.

Callers put requests on a bounded trio memory channel (waiting for room is
the backpressure). The writer takes what is queued, up to ``max_batch``, and
hops to a worker thread once for the whole batch: one IMMEDIATE transaction,
each request inside its own SAVEPOINT, one COMMIT (group commit). Back on the
event loop it resolves each request's ``Pending``.

Invariants:
- a request is resolved exactly once: with its value after the COMMIT
  returned, or with its own error (its savepoint was rolled back and its
  batch-mates still commit), or with ``StoreClosedError`` when the writer
  stopped before running it;
- the thread hop and the wake-ups run shielded, so cancellation can never
  separate a commit from its acknowledgement;
- requests run in channel order, so one task's writes apply in the order it
  submitted them;
- if SQLite cannot commit a transaction (a lock held past the busy timeout, an
  I/O error, a full disk), every request of that batch fails with a
  ``StoreError`` saying so, nothing of it is written, and the writer goes on
  with the next batch;
- if the writer itself breaks (any other exception: a bug), it dies: every
  request in flight or queued fails with ``StoreClosedError``, and every later
  submission is refused with the same cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, final

import apsw
import attrs
import outcome
import trio

from agentik._errors import StoreClosedError, StoreError
from agentik._messages import Message
from agentik.storage._common import Clock, to_micros
from agentik.storage._pending import Pending
from agentik.storage.sqlite._queries import InsertMessage, SeqCache, Session, insert_messages

T = TypeVar("T")

# A request's own failure: a constraint, a value SQLite or the encoder refuses,
# an ``agentik`` error raised on purpose. Anything else is a bug and kills the writer.
_REQUEST_ERRORS = (apsw.Error, StoreError, ValueError, TypeError, OverflowError)


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


class _Work(Protocol):
    def run(self, session: Session) -> None: ...
    def fail(self, error: BaseException) -> None: ...
    def resolve(self) -> None: ...


@final
class _Request(Generic[T]):
    """One write: the operation, then (set in the thread) its outcome."""

    __slots__ = ("_operation", "_result", "pending")

    def __init__(self, operation: Callable[[Session], T]) -> None:
        self._operation = operation
        self._result: outcome.Outcome[T] | None = None
        self.pending: Pending[T] = Pending()

    def run(self, session: Session) -> None:
        self._result = outcome.Value(self._operation(session))

    def fail(self, error: BaseException) -> None:
        self._result = outcome.Error(error)

    def resolve(self) -> None:
        assert self._result is not None
        self.pending.set(self._result)


@final
class _AppendRequest:
    """A message append: the common write, which the batch can insert in runs."""

    __slots__ = ("_result", "insert", "pending")

    def __init__(self, insert: InsertMessage) -> None:
        self.insert = insert
        self._result: outcome.Outcome[Message] | None = None
        self.pending: Pending[Message] = Pending()

    def run(self, session: Session) -> None:
        self._result = outcome.Value(self.insert(session))

    def succeed(self, message: Message) -> None:
        self._result = outcome.Value(message)

    def fail(self, error: BaseException) -> None:
        self._result = outcome.Error(error)

    def resolve(self) -> None:
        assert self._result is not None
        self.pending.set(self._result)


def _as_store_error(error: Exception) -> StoreError:
    if isinstance(error, StoreError):
        return error
    failure = StoreError(f"storage write failed: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure


def _append_run(batch: list[_Work], start: int) -> list[_AppendRequest]:
    run: list[_AppendRequest] = []
    for request in batch[start:]:
        if not isinstance(request, _AppendRequest):
            break
        run.append(request)
    return run


def _try_appends_at_once(session: Session, run: list[_AppendRequest]) -> bool:
    """Insert a run of appends with one executemany in one savepoint. On any
    failure roll it back and return False: the caller replays them one by one,
    so the failing request fails alone."""
    try:
        with session.connection:
            stored = insert_messages(session, [request.insert for request in run])
    except _REQUEST_ERRORS:
        session.seqs.undo()
        return False
    session.seqs.keep()
    for request, message in zip(run, stored, strict=True):
        request.succeed(message)
    return True


def _run_one(session: Session, request: _Work) -> bool:
    """Run one request in its own savepoint; return False if it failed."""
    try:
        with session.connection:  # inside a transaction: a SAVEPOINT
            request.run(session)
    except _REQUEST_ERRORS as error:
        session.seqs.undo()
        request.fail(_as_store_error(error))
        return False
    session.seqs.keep()
    return True


def _run_batch(
    connection: apsw.Connection, seqs: SeqCache, clock: Clock, batch: list[_Work]
) -> int:
    """One transaction, a savepoint per request (or per run of appends); return
    how many requests failed alone. Runs in a worker thread; raises only if the
    transaction itself fails."""
    now = clock()
    session = Session(connection=connection, seqs=seqs, now_us=to_micros(now), now=now)
    failed = 0
    committed = False
    # BEGIN and COMMIT go through execute(), which releases the GIL while SQLite
    # waits for a lock or syncs; apsw's outermost ``with connection:`` holds it
    # through the busy handler and would freeze the event loop meanwhile.
    connection.execute("BEGIN IMMEDIATE")
    try:
        position = 0
        while position < len(batch):
            run = _append_run(batch, position)
            if len(run) > 1 and _try_appends_at_once(session, run):
                position += len(run)
                continue
            for request in run or batch[position : position + 1]:
                failed += not _run_one(session, request)
            position += max(len(run), 1)
        connection.execute("COMMIT")
        committed = True
    finally:
        if not committed:
            seqs.clear()
            if connection.in_transaction:
                connection.execute("ROLLBACK")
    return failed


@final
class Writer:
    """Owns the write connection and the request channel; ``run`` is the task."""

    def __init__(
        self, connection: apsw.Connection, *, clock: Clock, max_batch: int, queue_size: int
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._max_batch = max_batch
        self._queue_capacity = queue_size
        self._send, self._receive = trio.open_memory_channel[_Work](queue_size)
        self._seqs = SeqCache()
        self._thread = trio.CapacityLimiter(1)
        self._closed = False
        self._failure: Exception | None = None
        self._batches = self._writes = self._failed = self._last = self._largest = 0
        self._failed_batches = 0

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

    async def submit_append(self, insert: InsertMessage) -> Pending[Message]:
        request = _AppendRequest(insert)
        await self._enqueue(request, schedule=True)
        return request.pending

    async def append(self, insert: InsertMessage) -> Message:
        request = _AppendRequest(insert)
        await self._enqueue(request, schedule=False)
        return await request.pending.wait()

    async def _enqueue(self, request: _Work, *, schedule: bool) -> None:
        """Put ``request`` on the channel, waiting only if it is full.

        A cancelled caller raises before anything is queued. When there is
        room, the request goes in without a task switch; ``schedule`` adds one
        afterwards (``submit`` keeps trio's rule that every async call is a
        schedule point; ``write`` gets its switch from waiting for the commit).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        try:
            try:
                self._send.send_nowait(request)
            except trio.WouldBlock:
                await self._send.send(request)
            else:
                if schedule:
                    await trio.lowlevel.cancel_shielded_checkpoint()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
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
        self._send.close()

    def stats(self) -> WriterStats:
        statistics = self._send.statistics()
        return WriterStats(
            running=not self._closed and self._failure is None,
            batches=self._batches,
            writes=self._writes,
            failed_writes=self._failed,
            failed_batches=self._failed_batches,
            last_batch_size=self._last,
            largest_batch_size=self._largest,
            queue_depth=statistics.current_buffer_used + statistics.tasks_waiting_send,
            queue_capacity=self._queue_capacity,
        )

    async def run(self) -> None:
        """Commit batches until the channel closes (or the writer dies)."""
        try:
            async for first in self._receive:
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                with trio.CancelScope(shield=True):
                    if not await self._commit(batch):
                        return
        finally:
            self._stop()

    async def _commit(self, batch: list[_Work]) -> bool:
        try:
            failed = await trio.to_thread.run_sync(
                _run_batch, self._connection, self._seqs, self._clock, batch, limiter=self._thread
            )
        except apsw.Error as error:
            # SQLite could not commit (a lock held past busy_timeout, an I/O
            # error, a full disk): nothing of the batch was written. Its callers
            # hear why; the writer goes on, so writes work again once the
            # cause clears.
            failure = StoreError(
                f"the write was not committed: its batch failed ({type(error).__name__}:"
                f" {error}); nothing of the batch was written"
            )
            failure.__cause__ = error
            for request in batch:
                request.fail(failure)
                request.resolve()
            self._failed_batches += 1
            self._failed += len(batch)
            return True
        except Exception as error:  # a bug: the writer cannot be trusted any more
            self._failure = error
            for request in batch:
                request.fail(self._died_error())
                request.resolve()
            return False
        for request in batch:
            request.resolve()
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
        """Fail whatever is still queued, then close the channel. Synchronous, so
        nothing can slip in between the drain and the close."""
        self._closed = True
        while True:
            try:
                request = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            request.fail(
                self._died_error()
                if self._failure is not None
                else StoreClosedError("the storage writer stopped before this write ran")
            )
            request.resolve()
        self._receive.close()
