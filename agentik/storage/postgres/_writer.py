"""PostgreSQL's half of the writer (``agentik.storage._writer``): one batch,
one transaction, on the one write connection, in the writer's thread.

Same shape as SQLite's engine: BEGIN; a run of consecutive appends inserted by
one statement in one SAVEPOINT (replayed one by one, each in its own, if it
fails); any other request in its own SAVEPOINT; COMMIT. The differences are
PostgreSQL's: a failed statement leaves the transaction unusable until its
savepoint is rolled back, so every request's savepoint is rolled back
explicitly; the seq cache is valid only while one writer writes each
conversation (``SeqCache``: with several nodes, while this node holds its
shard at one generation, which each batch checks); and the connection can be lost.

A lost connection (the server restarted, a network fault, the backend
terminated) fails the batch as a whole: PostgreSQL rolls back the open
transaction of a backend that goes away, so nothing of it was written, and
every caller is told. If it was lost *during* COMMIT nobody can know whether
the server committed first; the batch's callers are told exactly that
(``BatchFailed(doubt=LOST_IN_COMMIT)``). Either way the engine connects again before
the next batch, and a batch that finds its connection dead before it began
anything reconnects and carries on: nothing was lost, so nobody need hear.
A cancelled writer has the watchdog cut the connection (``interrupt``) if
the server has not answered ``CANCEL_GRACE`` later: its batch fails the same
way, without waiting out the watchdog's bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast, final

import psycopg

from agentik._errors import StoreError
from agentik.storage._common import Clock
from agentik.storage._writer import (
    LOST_IN_COMMIT,
    AppendRequest,
    BatchFailed,
    Outcome,
    Work,
    as_store_error,
)
from agentik.storage.postgres._leases import NodeLease
from agentik.storage.postgres._queries import SeqCache, Session, insert_messages
from agentik.storage.postgres._watchdog import Watchdog

# A request's own failure: a constraint, a value PostgreSQL or the encoder
# refuses, an ``agentik`` error raised on purpose. (Unless the connection broke
# meanwhile: then the batch fails.) Anything else is a bug and kills the writer.
_REQUEST_ERRORS = (psycopg.Error, StoreError, ValueError, TypeError, OverflowError)

# Errors of the storage rather than of the request (SQLSTATE classes 08, 53,
# 57, 58, XX and read-only transactions): every other write would fail the
# same way, so they make the storage "failing".
_STORAGE_FAULTS = (psycopg.OperationalError, psycopg.InternalError)


def _lost(connection: psycopg.Connection) -> bool:
    return connection.closed or connection.broken


def _savepoint(session: Session, run: Callable[[], None]) -> Exception | None:
    """Run ``run`` in a savepoint: released if it succeeds, rolled back (and
    its error returned) if it fails. A lost connection fails the batch."""
    connection = session.connection
    try:
        connection.execute("SAVEPOINT request")
        run()
    except _REQUEST_ERRORS as error:
        session.seqs.undo()
        if _lost(connection):
            raise BatchFailed from error
        try:
            connection.execute("ROLLBACK TO SAVEPOINT request")
        except psycopg.Error as lost:
            raise BatchFailed from lost
        return error
    try:
        connection.execute("RELEASE SAVEPOINT request")
    except psycopg.Error as error:
        raise BatchFailed from error
    session.seqs.keep()
    return None


def _run_one(session: Session, request: Work[Session], outcome: Outcome) -> None:
    error = _savepoint(session, lambda: request.run(session))
    if error is not None:
        request.fail(as_store_error(error))
        outcome.add(error, fault=isinstance(error, _STORAGE_FAULTS))


def _run_appends(session: Session, run: list[AppendRequest], outcome: Outcome) -> None:
    """A run of appends in one statement; one by one if that fails, so the
    failing request fails alone."""
    if _savepoint(session, lambda: insert_messages(session, run)) is not None:
        for request in run:
            _run_one(session, request, outcome)
        return
    now = session.now
    for request in run:
        request.stored_message = request.stored(now)


def _run_requests(
    session: Session, batch: list[Work[Session]], progress: Callable[[], None]
) -> Outcome:
    """Each request (a run of appends: each run) in its savepoint; ``progress``
    is called before each, restarting the watchdog's clock."""
    outcome = Outcome()
    session.seqs.prefetch([r.conversation_id for r in batch if type(r) is AppendRequest])
    position, total = 0, len(batch)
    while position < total:
        progress()
        end = position
        while end < total and type(batch[end]) is AppendRequest:
            end += 1
        if end - position > 1:
            whole = end - position == total
            run = cast("list[AppendRequest]", batch if whole else batch[position:end])
            _run_appends(session, run, outcome)
            position = end
        else:
            _run_one(session, batch[position], outcome)
            position += 1
    return outcome


@final
class PostgresEngine:
    """The write connection, for the writer's thread; reconnects when it is lost."""

    def __init__(
        self,
        connection: psycopg.Connection,
        connect: Callable[[], psycopg.Connection],
        clock: Clock,
        lease: NodeLease | None = None,
        *,
        watchdog: Watchdog,
    ) -> None:
        self.connection = connection
        self._connect = connect
        self._clock = clock
        self._lease = lease
        self._watchdog = watchdog
        self._seqs = SeqCache()

    def _reconnect(self) -> None:
        self.connection.close()
        try:
            self.connection = self._connect()
        except StoreError as error:
            raise BatchFailed from error

    def _begin(self) -> None:
        if _lost(self.connection):
            self._reconnect()
        try:
            self._execute_watched("BEGIN")
        except psycopg.OperationalError as error:
            if not _lost(self.connection):
                raise BatchFailed from error
            # Died while idle (a server restart): nothing was under way.
            self._reconnect()
            try:
                self._execute_watched("BEGIN")
            except psycopg.Error as again:
                raise BatchFailed from again

    def _execute_watched(self, statement: str) -> None:
        try:
            with self._watchdog.watch(self.connection):
                self.connection.execute(statement)
        except StoreError as unanswered:  # the watchdog cut it: nothing was under way
            raise BatchFailed from unanswered

    def run_batch(self, batch: list[Work[Session]]) -> Outcome:
        self._begin()
        connection = self.connection
        seqs = self._seqs
        seqs.start(connection, None if self._lease is None else self._lease.fence)
        session = Session(connection=connection, seqs=seqs, now=self._clock())
        committed = False
        try:
            with self._watchdog.watch(connection) as watch:
                try:
                    outcome = _run_requests(session, batch, watch.touch)
                except psycopg.Error as error:  # the prefetch, outside any savepoint
                    raise BatchFailed from error
                watch.touch()
                try:
                    connection.execute("COMMIT")
                except psycopg.Error as error:
                    doubt = LOST_IN_COMMIT if _lost(connection) else None
                    raise BatchFailed(doubt=doubt) from error
            committed = True
        finally:
            if not committed:
                seqs.clear()
            if not committed and not _lost(connection):
                try:
                    self._execute_watched("ROLLBACK")
                except (psycopg.Error, BatchFailed):
                    connection.close()  # the next batch reconnects
        return outcome

    def interrupt(self) -> None:
        """The writer was cancelled: the watchdog cuts whatever still waits
        for the server ``CANCEL_GRACE`` from now (``Watchdog.hurry``); a
        COMMIT cut so fails its batch in doubt, anything before it plainly."""
        self._watchdog.hurry()

    def close(self) -> None:
        self.connection.close()
