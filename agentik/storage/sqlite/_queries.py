"""SQLite's SQL: its ``Dialect``, and what it does its own way.

The SQL both backends share lives in ``agentik.storage._sql_*``, run here
over ``SqliteDialect`` (``QUERIES``). What stays here is SQLite's own: the
seq cache, the appends the writer inserts in multi-row statements, and the
one-statement read of a burst of conversation snapshots; each a measured
fast path (docs/performance.md).

Write operations take a ``Session`` (the writer's connection inside its open
transaction, the seq cache, and the batch's timestamp) and run inside their
own SAVEPOINT, opened by the writer: raising rolls back that request alone.
Read operations take a read-only connection and finish every statement they
start, so no read transaction stays open between calls. Nothing here touches
trio; callers run these functions in worker threads.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from itertools import chain
from typing import Any, cast, final

import apsw
import attrs

from agentik._errors import DuplicateKeyError, StoreError
from agentik._json import dumps_ascii
from agentik._memory import MemoryEntry
from agentik._messages import Message
from agentik.storage._common import from_micros, to_micros
from agentik.storage._dialect import Dialect, Params, Row
from agentik.storage._rows import MessageRow
from agentik.storage._rows import tool_calls_json as tool_calls_json
from agentik.storage._sql_lifecycle import SqlQueries
from agentik.storage._values import ConversationSnapshot

_SEQ_CACHE_SIZE = 10_000


@final
class SeqCache:
    """The last seq of recently written conversations, so most appends skip
    the ``max(seq)`` lookup. Owned by the writer thread. If a request's
    savepoint rolls back, the conversations it touched are forgotten (the next
    append looks them up again, which also heals a cache gone stale because
    something else wrote to the file); if a transaction fails, everything is."""

    def __init__(self, capacity: int = _SEQ_CACHE_SIZE) -> None:
        self._last: dict[str, int] = {}
        self._touched: set[str] = set()
        self._capacity = capacity

    def next_seq(self, connection: apsw.Connection, conversation_id: str) -> int:
        last_seqs = self._last
        last = last_seqs.get(conversation_id)
        self._touched.add(conversation_id)
        if last is None:
            last = _max_seq(connection, conversation_id)
            if len(last_seqs) >= self._capacity:
                self._evict()
        last_seqs[conversation_id] = last + 1
        return last + 1

    def prefetch(self, connection: apsw.Connection, conversation_ids: set[str]) -> None:
        """Look up at once the last seqs of the conversations in
        ``conversation_ids`` that the cache does not hold: one statement and
        one step, where a lookup each would take the GIL back once each (and
        wait for it while the event loop is busy: a burst of new
        conversations made a batch of 224 rows take 59 ms)."""
        last_seqs = self._last
        # An id JSON might not carry through exactly (a NUL, a lone surrogate)
        # is left to ``next_seq``'s own lookup.
        missing = [cid for cid in conversation_ids if cid not in last_seqs and cid.isprintable()]
        if len(missing) < 2:
            return  # ``next_seq`` looks a single one up itself
        found = connection.execute(_MAX_SEQS, (dumps_ascii(missing),)).get
        seqs = dict(zip(missing, json.loads(cast("str", found)), strict=True))
        self._touched.update(missing)
        for conversation_id in missing:
            if len(last_seqs) >= self._capacity:
                self._evict()
            last_seqs[conversation_id] = seqs[conversation_id] or 0

    def _evict(self) -> None:
        """Forget the oldest entry that the current request has not touched."""
        for conversation_id in self._last:
            if conversation_id not in self._touched:
                del self._last[conversation_id]
                return

    def forget(self, conversation_id: str) -> None:
        """The conversation's rows were deleted or replaced (``_sql_lifecycle``):
        its next append reads the last seq from the table again."""
        self._last.pop(conversation_id, None)

    def fence(self, conversation_id: str) -> None:
        """One process writes a SQLite file (its lock): nothing to fence."""

    def keep(self) -> None:
        """The request's savepoint was released."""
        self._touched.clear()

    def undo(self) -> None:
        """The request's savepoint was rolled back."""
        for conversation_id in self._touched:
            self._last.pop(conversation_id, None)
        self._touched.clear()

    def clear(self) -> None:
        """The whole transaction was rolled back."""
        self._last.clear()
        self._touched.clear()


_MAX_SEQS = (
    "SELECT json_group_array((SELECT max(seq) FROM message WHERE conversation_id = value))"
    " FROM (SELECT value FROM json_each(?) ORDER BY key)"
)
"""The last seq (or null) of each conversation id of a JSON array, in its order."""


def _max_seq(connection: apsw.Connection, conversation_id: str) -> int:
    row = connection.execute(
        "SELECT max(seq) FROM message WHERE conversation_id = ?", (conversation_id,)
    ).get
    return row if isinstance(row, int) else 0


@attrs.frozen
class Session:
    """What a write operation runs with."""

    connection: apsw.Connection
    seqs: SeqCache
    now_us: int
    """The batch's timestamp: every write of one batch shares it."""
    now: datetime
    """The same instant as an aware UTC datetime."""

    @property
    def stamp(self) -> int:
        """The batch's time as SQLite binds it (``SqlSession.stamp``)."""
        return self.now_us

    def insert_message(self, row: MessageRow) -> Message:
        """Insert one row (what an append request runs when it is alone)."""
        return insert_message(self, row)


# --- messages -------------------------------------------------------------------

_MESSAGE_INSERT_COLUMNS = (
    "conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_us, idempotency_key, parts"
)
_INSERT_MESSAGE = (
    f"INSERT INTO message ({_MESSAGE_INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_Row = tuple[
    str, int, str, str, str | None, str | None, int | None, int | None, int, str | None, str | None
]


def _row(session: Session, row: MessageRow) -> _Row:
    """The ``message`` row to insert, with its conversation's next seq
    (recorded in ``row.seq``): the one place that builds it, for the single
    and the multi-row insert."""
    conversation_id = row.conversation_id
    row.seq = seq = session.seqs.next_seq(session.connection, conversation_id)
    message = row.message
    return (
        conversation_id,
        seq,
        row.role,
        message.content,
        row.tool_calls,
        message.tool_call_id,
        row.prompt_tokens,
        row.completion_tokens,
        session.now_us,
        row.idempotency_key,
        row.parts,
    )


def insert_message(session: Session, row: MessageRow) -> Message:
    """Insert one message with its conversation's next seq (recorded in
    ``row.seq``); a reused idempotency key is a ``DuplicateKeyError``."""
    connection = session.connection
    try:
        connection.execute(_INSERT_MESSAGE, _row(session, row))
    except apsw.ConstraintError:
        _raise_if_duplicate(connection, row)
        raise
    if row.blobs:
        QUERIES.insert_blobs(connection, row.conversation_id, row.blobs)
    return row.stored(session.now)


def _raise_if_duplicate(connection: apsw.Connection, row: MessageRow) -> None:
    key = row.idempotency_key
    if key is None:
        return
    used = QUERIES.find_idempotency_key(connection, row.conversation_id, key)
    if used is not None:
        raise DuplicateKeyError(
            f"idempotency key {key!r} was already used in conversation"
            f" {row.conversation_id!r} (message seq {used})"
        )


_ROW_PLACEHOLDERS = "(?,?,?,?,?,?,?,?,?,?,?)"
LARGEST_CHUNK = 512
"""Rows in the largest multi-row INSERT: its SQL (12 KiB) stays under the
16 KiB up to which apsw caches a prepared statement, and its 5,632 bindings
under SQLite's limit of 32,766."""
_INSERT_ROWS = {
    size: f"INSERT INTO message ({_MESSAGE_INSERT_COLUMNS}) VALUES "
    + ",".join([_ROW_PLACEHOLDERS] * size)
    for size in (1 << power for power in range(LARGEST_CHUNK.bit_length()))
}


def insert_messages(session: Session, inserts: Sequence[MessageRow]) -> None:
    """Insert several messages, all or none (the caller's savepoint), each
    ``insert.seq`` set to its seq.

    A few multi-row ``INSERT … VALUES (…), (…), …`` statements rather than an
    ``executemany``: chunks of 512, 256, … 1 rows, so only ten statement texts
    exist and apsw's cache keeps them prepared. Each statement binds its rows
    at once and SQLite inserts them in one step, where ``executemany`` goes
    back to Python (and takes the GIL) for every row.
    """
    connection = session.connection
    session.seqs.prefetch(connection, {insert.conversation_id for insert in inserts})
    rows = [_row(session, insert) for insert in inserts]
    position, total = 0, len(rows)
    while position < total:
        left = total - position
        size = LARGEST_CHUNK if left >= LARGEST_CHUNK else 1 << (left.bit_length() - 1)
        chunk = rows[position : position + size] if size < total else rows
        connection.execute(_INSERT_ROWS[size], list(chain.from_iterable(chunk)))
        position += size
    for insert in inserts:
        if insert.blobs:
            QUERIES.insert_blobs(connection, insert.conversation_id, insert.blobs)


# --- the dialect ------------------------------------------------------------------


@final
class SqliteDialect(Dialect[apsw.Connection]):
    """SQLite's spelling of the shared SQL (``agentik.storage._dialect``): text
    as text, times as integer microseconds, flags as 0/1, a list of ids as one
    JSON array (``json_each``); apsw runs it."""

    names = {  # noqa: RUF012 (read only)
        "created": "created_us",
        "updated": "updated_us",
        "decided": "decided_us",
        "active": "archived = 0",  # as written, so the partial index on active notes applies
        "archived": "archived = 1",
        "set_archived": "archived = 1",
        "ids_in": "id IN (SELECT value FROM json_each(?))",
        "key_ends_with": "(:suffix = '' OR substr(idempotency_key, -length(:suffix)) = :suffix)",
        "for_update": "",
    }
    unique_violation = apsw.ConstraintError
    foreign_key_violation = apsw.ConstraintError

    def rows(self, connection: apsw.Connection, sql: str, params: Params = ()) -> list[Row]:
        return _fetch_all(connection, sql, params)

    def row(self, connection: apsw.Connection, sql: str, params: Params = ()) -> Row | None:
        # fetchall, not fetchone: a statement left unfinished would hold a
        # read transaction open on the connection.
        rows = _fetch_all(connection, sql, params)
        return rows[0] if rows else None

    def changed(self, connection: apsw.Connection, sql: str, params: Params = ()) -> int:
        connection.execute(sql, params)
        changes: int = connection.changes()
        return changes

    def many(self, connection: apsw.Connection, sql: str, rows: Sequence[Sequence[object]]) -> None:
        connection.executemany(sql, rows)

    def snapshot(self, connection: apsw.Connection) -> AbstractContextManager[object]:
        return cast("AbstractContextManager[object]", connection)  # a read transaction

    def guard(self, connection: apsw.Connection) -> AbstractContextManager[object]:
        return contextlib.nullcontext()  # the request's savepoint is enough

    def text(self, value: str) -> object:
        return value

    def text_of(self, value: Any) -> str:
        return cast("str", value)

    def time(self, value: datetime) -> object:
        return to_micros(value)

    def time_of(self, value: Any) -> datetime:
        return from_micros(cast("int", value))

    def ids(self, values: Sequence[int]) -> object:
        return json.dumps(sorted(set(values)))


def _fetch_all(connection: apsw.Connection, sql: str, params: Params) -> list[Row]:
    """Every row of ``sql``. Text that is not UTF-8 (apsw decodes every TEXT
    value) can only be a damaged page or a hand edit: the storage's error,
    with the statement reset so no read transaction stays open."""
    cursor = connection.execute(sql, params)
    try:
        return cast("list[Row]", cursor.fetchall())
    except UnicodeDecodeError as error:
        cursor.close(force=True)
        message = f"the database holds text that is not UTF-8 (damaged?): {error}"
        raise StoreError(message) from error


# --- the queries --------------------------------------------------------------------

_SNAPSHOTS = """
SELECT json_group_array(json_array(
  json((SELECT json_group_array(json_array(
           seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens,
           created_us, parts) ORDER BY seq)
        FROM (SELECT * FROM message WHERE conversation_id = ids.value ->> 0
              AND seq > ids.value ->> 1 ORDER BY seq LIMIT ?2))),
  json((SELECT json_group_array(json_array(id, text, created_us) ORDER BY id)
        FROM memory_entry WHERE conversation_id = ids.value ->> 0 AND archived = 0)),
  json((SELECT json_array(through_seq, text, created_us) FROM summary
        WHERE conversation_id = ids.value ->> 0 ORDER BY through_seq DESC LIMIT 1))
) ORDER BY ids.key)
FROM json_each(?1) AS ids
"""
"""For each [conversation id, after seq] of a JSON array: [its page of history,
its active notes, its latest summary], all one JSON value: one step."""


@final
class SqliteQueries(SqlQueries[apsw.Connection]):
    """The shared queries over ``SqliteDialect``, reading a burst of snapshots
    in one statement."""

    def conversation_snapshots(
        self, connection: apsw.Connection, requests: list[tuple[str, int, int]]
    ) -> list[ConversationSnapshot]:
        """A page of history after ``after_seq``, the active notes and the latest
        summary, of each (conversation id, limit, after seq): one statement (so
        one read snapshot) for each limit there is, usually one.

        Every call into SQLite gives up the GIL and takes it back, which costs
        more than the query while other threads run Python: 1,000 conversations
        starting at once made 1,000 three-query reads, about a dozen calls each.
        As one statement whose answer is one JSON value, a burst is one call.
        ``ensure_ascii=False`` keeps a lone surrogate one, which the binding
        refuses, as a single read's does. (``conversation_snapshot``, the
        plain reads, is what tests/storage/test_snapshots.py checks it against.)
        """
        by_limit: dict[int, list[int]] = {}
        for index, (_, limit, _) in enumerate(requests):
            by_limit.setdefault(limit, []).append(index)
        snapshots: list[ConversationSnapshot | None] = [None] * len(requests)
        for limit, indexes in by_limit.items():
            ids = json.dumps(
                [[requests[i][0], requests[i][2]] for i in indexes], ensure_ascii=False
            )
            ((found,),) = _fetch_all(connection, _SNAPSHOTS, (ids, limit))
            parts: list[Any] = json.loads(cast("str", found))
            for index, (messages, notes, summary) in zip(indexes, parts, strict=True):
                conversation_id = requests[index][0]
                snapshots[index] = ConversationSnapshot(
                    tuple(self.messages_of(connection, messages)),
                    tuple(
                        MemoryEntry(
                            id=entry_id,
                            conversation_id=conversation_id,
                            text=text,
                            created_at=from_micros(created_us),
                        )
                        for entry_id, text, created_us in notes
                    ),
                    None if summary is None else self._summary(summary),
                )
        return cast("list[ConversationSnapshot]", snapshots)


QUERIES = SqliteQueries(SqliteDialect())
"""Every query SQLite's stores run (``_sql_stores``)."""
