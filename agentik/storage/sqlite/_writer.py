"""SQLite's half of the writer (``agentik.storage._writer``): one batch, one transaction.

The writer hops to a worker thread once for the whole batch and calls
``SqliteEngine.run_batch``: one IMMEDIATE transaction, one COMMIT.

Inside the transaction a run of consecutive message appends is inserted at
once, with a few multi-row INSERT statements inside one SAVEPOINT; any other
request runs in its own SAVEPOINT. If a run fails, its savepoint is rolled back
and its appends are replayed one by one, each in its own savepoint, so the
failing one fails alone. If SQLite cannot begin or commit (a lock held past
the busy timeout, an I/O error, a full disk), or an error ends the transaction
early, ``BatchFailed`` tells the writer that nothing of the batch was written;
but a COMMIT whose write-ahead log was written and could not be synced is in
doubt: not visible now, its frames are in the log, and a later open that
finds the log (a close that could not checkpoint it) takes them for committed.
"""

from __future__ import annotations

from typing import cast, final

import apsw

from agentik._errors import StoreError
from agentik.storage._common import Clock, to_micros
from agentik.storage._writer import (
    AppendRequest,
    BatchFailed,
    Outcome,
    Work,
    as_store_error,
)
from agentik.storage.sqlite._queries import SeqCache, Session, insert_messages

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


class _TransactionLost(BatchFailed):
    """An error ended the transaction early (SQLite rolls it back by itself on
    some I/O, full-disk and out-of-memory errors): the batch fails as a whole."""


def _check_transaction(connection: apsw.Connection, error: Exception) -> None:
    if not connection.in_transaction:
        raise _TransactionLost from error


def _try_appends_at_once(session: Session, run: list[AppendRequest]) -> bool:
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
        request.stored_message = request.stored(now)
    return True


def _run_one(session: Session, request: Work[Session]) -> Exception | None:
    """Run one request in its own savepoint; return its error if it failed."""
    try:
        with session.connection:  # inside a transaction: a SAVEPOINT
            request.run(session)
    except _REQUEST_ERRORS as error:
        session.seqs.undo()
        _check_transaction(session.connection, error)
        request.fail(as_store_error(error))
        return error
    session.seqs.keep()
    return None


def _run_requests(session: Session, batch: list[Work[Session]]) -> Outcome:
    """Every request of the batch, runs of appends at once."""
    outcome = Outcome()
    position, total = 0, len(batch)
    while position < total:
        end = position
        while end < total and type(batch[end]) is AppendRequest:
            end += 1
        if end - position > 1:
            whole = end - position == total
            run = cast("list[AppendRequest]", batch if whole else batch[position:end])
            if not _try_appends_at_once(session, run):
                for request in run:
                    _add(outcome, _run_one(session, request))
            position = end
        else:
            _add(outcome, _run_one(session, batch[position]))
            position += 1
    return outcome


def _add(outcome: Outcome, error: Exception | None) -> None:
    outcome.add(error, fault=isinstance(error, _STORAGE_FAULTS))


_SYNC_FAILED = frozenset({apsw.SQLITE_IOERR_FSYNC, apsw.SQLITE_IOERR_DIR_FSYNC})
_SYNC_DOUBT = (
    "syncing its COMMIT to disk failed; it is not visible now, and a restart may find it, whole"
)


def _run_batch(
    connection: apsw.Connection, seqs: SeqCache, clock: Clock, batch: list[Work[Session]]
) -> Outcome:
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
class SqliteEngine:
    """The write connection and its seq cache, for the writer's thread."""

    def __init__(self, connection: apsw.Connection, clock: Clock) -> None:
        self.connection = connection
        self._clock = clock
        self._seqs = SeqCache()

    def run_batch(self, batch: list[Work[Session]]) -> Outcome:
        try:
            return _run_batch(self.connection, self._seqs, self._clock, batch)
        except apsw.Error as error:
            # BEGIN or COMMIT failed: a lock held past busy_timeout, an I/O
            # error, a full disk. Nothing of the batch was written, unless the
            # log was and its sync failed.
            if getattr(error, "extendedresult", None) in _SYNC_FAILED:
                raise BatchFailed(doubt=_SYNC_DOUBT) from error
            raise BatchFailed from error

    def interrupt(self) -> None:
        """Nothing to cut: a local file answers (a lock wait is bounded by
        ``busy_timeout``, and a COMMIT cut short would leave it in doubt)."""
