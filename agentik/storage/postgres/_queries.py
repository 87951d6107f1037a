"""PostgreSQL's SQL: its ``Dialect``, and what it does its own way.

The SQL both backends share lives in ``agentik.storage._sql_*``, run here
over ``PostgresDialect`` (``QUERIES``). What stays here is PostgreSQL's own:
the seq cache with its shard fence, the appends the writer inserts in one
``INSERT … SELECT FROM unnest(…)`` (one round trip whatever the number of
rows), and the snapshots of a burst of conversation loads read together
(``PostgresQueries``).

Write operations take a ``Session`` (the writer's connection inside its open
transaction, the batch's seqs, and the batch's timestamp) and run inside
their own SAVEPOINT, opened by the writer: raising rolls back that request
alone. Read operations take a reader's connection (autocommit: each
statement its own snapshot; reads that need two statements to agree run
them in one REPEATABLE READ transaction). Nothing here touches trio; callers
run these functions in worker threads.

Strings go in and out as UTF-8 ``bytea`` (see migrations/0001_init.sql for why).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast, final

import attrs
import psycopg
from psycopg import errors

from agentik._errors import DuplicateKeyError, StoreError
from agentik._memory import MemoryEntry
from agentik._messages import Message
from agentik.storage._dialect import Dialect, Params, Row, psycopg_placeholders
from agentik.storage._rows import MessageRow
from agentik.storage._shards import shard_of
from agentik.storage._sql_lifecycle import SqlQueries
from agentik.storage._sql_messages import MESSAGE_COLUMNS, NOTE_COLUMNS
from agentik.storage._sql_turns import SUMMARY_COLUMNS
from agentik.storage._values import ConversationSnapshot, Summary

if TYPE_CHECKING:
    from agentik.storage.postgres._lease_sql import Fence

KEPT_TABLES: tuple[str, ...] = ()
"""Tables keyed by conversation that a delete keeps on purpose (beside
``_sql_lifecycle.CONVERSATION_TABLES``): none since nodes own conversations
through their shards (``agentik_shard``, keyed by shard, not conversation)."""


_LAST_SEQS = """
SELECT c, (SELECT max(seq) FROM message WHERE conversation_id = c)
FROM unnest(%(ids)s::bytea[]) AS c
"""

# Which of these shards this node holds at the generation it took them at
# (the fencing token), its own lease alive; their rows stay locked until the
# batch ends, so a takeover (which skips locked rows) waits for it.
_HELD = """
SELECT s.shard FROM agentik_shard AS s
JOIN unnest(%(shards)s::integer[], %(generations)s::bigint[]) AS w (shard, generation)
    ON s.shard = w.shard AND s.generation = w.generation
WHERE s.node_id = %(me)s AND EXISTS (
    SELECT 1 FROM agentik_node WHERE node_id = %(me)s AND expires_at > clock_timestamp())
FOR SHARE OF s
"""

_SEQ_CACHE_SIZE = 10_000


@final
class SeqCache:
    """The last seq of recently written conversations, so most appends skip
    the ``max(seq)`` look-up; owned by the writer's thread, as SQLite's.

    It is sound because one writer writes each conversation: on a single node
    by configuration, and with several nodes because a node writes only the
    conversations of the shards it holds, and it holds a shard without a gap
    for as long as the shard's generation (and its node id) stays the same; a
    conversation whose shard changed generation is looked up again. Each
    batch checks (and locks, ``FOR SHARE``) the shards it writes to against
    the generations the node took them at (``Fence``), and a message for a
    shard the node does not hold is refused. A request whose savepoint rolls
    back forgets the conversations it touched (and the shard locks taken in
    it); a failed transaction forgets everything (and a cache gone stale,
    because something else wrote, heals after one failed write, as SQLite's
    does)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._touched: set[str] = set()
        self._held: set[int] = set()
        """Shards whose generation this batch checked and locked."""
        self._checked: set[int] = set()
        """Of those, shards checked inside the request's savepoint."""
        self._fence: Fence | None = None
        self._connection: psycopg.Connection | None = None

    def start(self, connection: psycopg.Connection, fence: Fence | None) -> None:
        """A batch begins on ``connection``, against ``fence`` (None: one node)."""
        previous = self._fence
        if len(self._last) > _SEQ_CACHE_SIZE or (fence is None) != (previous is None):
            self._last.clear()
        elif fence is not None and previous is not None and fence is not previous:
            if fence.node_id != previous.node_id:
                self._last.clear()
            else:
                self._forget_moved(previous.generations, fence.generations, fence.shards)
        self._fence = fence
        self._connection = connection
        self._held.clear()
        self._checked.clear()
        self._touched.clear()

    def _forget_moved(
        self, before: Mapping[int, int], after: Mapping[int, int], shards: int
    ) -> None:
        moved = {s for s, g in before.items() if after.get(s) != g}
        if moved:
            for conversation_id in [c for c in self._last if shard_of(c, shards) in moved]:
                del self._last[conversation_id]

    def clear(self) -> None:
        """The whole transaction was rolled back."""
        self._last.clear()
        self._held.clear()
        self._checked.clear()
        self._touched.clear()

    def prefetch(self, conversation_ids: Sequence[str]) -> None:
        """Check the shards of the batch's conversations and read the seqs
        not cached: one statement each, whatever the number of conversations."""
        if self._fence is not None:
            self._check_held(conversation_ids)
        unknown = list({c for c in conversation_ids if c not in self._last})
        if unknown:
            self._look_up(unknown)

    def _check_held(self, conversation_ids: Iterable[str]) -> set[int]:
        """Check and lock the shards of ``conversation_ids`` this node believes
        it holds; the shards found held (at the generation it believes)."""
        fence = self._fence
        assert self._connection is not None
        assert fence is not None
        wanted = {shard_of(c, fence.shards) for c in conversation_ids} - self._held
        believed = sorted(s for s in wanted if s in fence.generations)
        if not believed:
            return set()
        rows = self._connection.execute(
            _HELD,
            {
                "shards": believed,
                "generations": [fence.generations[s] for s in believed],
                "me": fence.node_id,
            },
        ).fetchall()
        found = {int(row[0]) for row in rows}
        self._held.update(found)
        return found

    def _look_up(self, conversation_ids: list[str]) -> None:
        assert self._connection is not None
        rows = self._connection.execute(
            _LAST_SEQS, {"ids": [c.encode() for c in conversation_ids]}
        ).fetchall()
        for conversation, last in rows:
            self._last[bytes(conversation).decode()] = last or 0

    def fence(self, conversation_id: str) -> None:
        """Refuse (``StoreError``) a write to a conversation of a shard this
        node does not hold (at the generation it took it), and lock the
        shard's row for the batch; with one node, nothing."""
        fence = self._fence
        if fence is None:
            return
        shard = shard_of(conversation_id, fence.shards)
        if shard in self._held:
            return
        self._checked.update(self._check_held([conversation_id]))  # its lock goes with a rollback
        if shard not in self._held:
            raise StoreError(
                f"conversation {conversation_id!r} is not owned by this node;"
                " its messages are written by the node holding its shard"
            )

    def forget(self, conversation_id: str) -> None:
        """The conversation's rows were deleted or replaced (``_sql_lifecycle``):
        its next append reads the last seq from the table again."""
        self._last.pop(conversation_id, None)

    def next_seq(self, conversation_id: str) -> int:
        self.fence(conversation_id)
        last = self._last.get(conversation_id)
        if last is None:
            self._look_up([conversation_id])
            last = self._last[conversation_id]
        self._touched.add(conversation_id)
        self._last[conversation_id] = last + 1
        return last + 1

    def keep(self) -> None:
        """The request's savepoint was released."""
        self._touched.clear()
        self._checked.clear()

    def undo(self) -> None:
        """The request's savepoint was rolled back."""
        for conversation_id in self._touched:
            self._last.pop(conversation_id, None)
        self._held -= self._checked
        self._touched.clear()
        self._checked.clear()


@attrs.frozen
class Session:
    """What a write operation runs with."""

    connection: psycopg.Connection
    seqs: SeqCache
    now: datetime
    """The batch's timestamp: every write of one batch shares it."""

    @property
    def stamp(self) -> datetime:
        """The batch's time as PostgreSQL binds it (``SqlSession.stamp``)."""
        return self.now

    def insert_message(self, row: MessageRow) -> Message:
        """Insert one row (what an append request runs when it is alone)."""
        return insert_message(self, row)


# --- messages -------------------------------------------------------------------

_INSERT_COLUMNS = (
    "conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_at, idempotency_key, parts"
)
_INSERT_ROWS = (
    f"INSERT INTO message ({_INSERT_COLUMNS})"
    " SELECT c, s, r, b, tc, ti, pt, ct, %s, k, p FROM unnest("
    "%s::bytea[], %s::bigint[], %s::text[], %s::bytea[], %s::text[], %s::bytea[],"
    " %s::bigint[], %s::bigint[], %s::bytea[], %s::text[])"
    " AS u(c, s, r, b, tc, ti, pt, ct, k, p)"
)


def insert_messages(session: Session, rows: Sequence[MessageRow]) -> None:
    """Insert several messages in one statement, all or none (the caller's
    savepoint), each ``row.seq`` set to its seq: one ``INSERT … SELECT FROM
    unnest(arrays)``, one round trip whatever the number of rows, its
    parameters sent in binary."""
    next_seq = session.seqs.next_seq
    conversations: list[bytes] = []
    seqs: list[int] = []
    roles: list[str] = []
    contents: list[bytes] = []
    calls: list[str | None] = []
    call_ids: list[bytes | None] = []
    prompts: list[int | None] = []
    completions: list[int | None] = []
    keys: list[bytes | None] = []
    parts: list[str | None] = []
    for row in rows:
        conversation_id = row.conversation_id
        row.seq = seq = next_seq(conversation_id)
        message = row.message
        conversations.append(conversation_id.encode())
        seqs.append(seq)
        roles.append(row.role)
        contents.append(message.content.encode())
        calls.append(row.tool_calls)
        tool_call_id = message.tool_call_id
        call_ids.append(None if tool_call_id is None else tool_call_id.encode())
        prompts.append(row.prompt_tokens)
        completions.append(row.completion_tokens)
        key = row.idempotency_key
        keys.append(None if key is None else key.encode())
        parts.append(row.parts)
    session.connection.execute(
        _INSERT_ROWS,
        (
            session.now,
            conversations,
            seqs,
            roles,
            contents,
            calls,
            call_ids,
            prompts,
            completions,
            keys,
            parts,
        ),
    )
    for row in rows:
        if row.blobs:
            QUERIES.insert_blobs(session.connection, row.conversation_id, row.blobs)


def insert_message(session: Session, row: MessageRow) -> Message:
    """Insert one message; a reused idempotency key is a ``DuplicateKeyError``.
    After a unique violation the transaction is unusable until a savepoint is
    rolled back, so a keyed insert runs in a savepoint of its own and the key
    is looked up after that one is rolled back."""
    key = row.idempotency_key
    if key is None:
        insert_messages(session, (row,))
        return row.stored(session.now)
    connection = session.connection
    try:
        with connection.transaction():  # a nested SAVEPOINT
            insert_messages(session, (row,))
    except errors.UniqueViolation as error:
        if error.diag.constraint_name != "message_by_idempotency_key":
            raise
        used = QUERIES.find_idempotency_key(connection, row.conversation_id, key)
        raise DuplicateKeyError(
            f"idempotency key {key!r} was already used in conversation"
            f" {row.conversation_id!r} (message seq {used})"
        ) from error
    return row.stored(session.now)


# --- the dialect ------------------------------------------------------------------

_KEY_ENDS_WITH = (
    "(length(:suffix::bytea) = 0 OR (length(idempotency_key) >= length(:suffix::bytea)"
    " AND substring(idempotency_key FROM length(idempotency_key)"
    " - length(:suffix::bytea) + 1) = :suffix::bytea))"
)
"""A bytea ends with a suffix: byte-wise, which for UTF-8 is character-wise."""


@final
class PostgresDialect(Dialect[psycopg.Connection]):
    """PostgreSQL's spelling of the shared SQL (``agentik.storage._dialect``):
    strings as UTF-8 bytea, times as timestamptz, flags as booleans, a list of
    ids as one array; psycopg runs it, its placeholders ``%s``/``%(name)s``."""

    names = {  # noqa: RUF012 (read only)
        "created": "created_at",
        "updated": "updated_at",
        "decided": "decided_at",
        "active": "NOT archived",  # as written, so the partial index on active notes applies
        "archived": "archived",
        "set_archived": "archived = true",
        "ids_in": "id = ANY(?::bigint[])",
        "key_ends_with": _KEY_ENDS_WITH,
        "for_update": " FOR UPDATE",
    }
    unique_violation = errors.UniqueViolation
    foreign_key_violation = errors.ForeignKeyViolation

    def _translate(self, statement: str) -> str:
        return psycopg_placeholders(statement)

    def rows(self, connection: psycopg.Connection, sql: str, params: Params = ()) -> list[Row]:
        return connection.execute(sql, params).fetchall()

    def row(self, connection: psycopg.Connection, sql: str, params: Params = ()) -> Row | None:
        return connection.execute(sql, params).fetchone()

    def changed(self, connection: psycopg.Connection, sql: str, params: Params = ()) -> int:
        return connection.execute(sql, params).rowcount

    def many(
        self, connection: psycopg.Connection, sql: str, rows: Sequence[Sequence[object]]
    ) -> None:
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)

    def snapshot(self, connection: psycopg.Connection) -> AbstractContextManager[object]:
        return _repeatable_read(connection)

    def guard(self, connection: psycopg.Connection) -> AbstractContextManager[object]:
        return connection.transaction()  # a nested SAVEPOINT

    def text(self, value: str) -> object:
        return value.encode()

    def text_of(self, value: Any) -> str:
        return bytes(value).decode()

    def time(self, value: datetime) -> object:
        return value

    def time_of(self, value: Any) -> datetime:
        return cast("datetime", value)

    def ids(self, values: Sequence[int]) -> object:
        # An id no bigint can be matches nothing (and must not fail the statement).
        return sorted({i for i in values if -(2**63) <= i < 2**63})


@contextmanager
def _repeatable_read(connection: psycopg.Connection) -> Iterator[None]:
    """One REPEATABLE READ, READ ONLY transaction: its statements see one snapshot."""
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


_PAGES = (
    "SELECT r.i, m.* FROM unnest(?::bytea[], ?::bigint[], ?::bigint[])"
    " WITH ORDINALITY AS r (c, a, l, i)"
    f" CROSS JOIN LATERAL (SELECT {MESSAGE_COLUMNS} FROM message"
    " WHERE conversation_id = r.c AND seq > r.a ORDER BY seq LIMIT r.l) AS m"
    " ORDER BY r.i, m.seq"
)
_NOTES = (
    f"SELECT {NOTE_COLUMNS} FROM memory_entry"
    " WHERE conversation_id = ANY(?::bytea[]) AND {active} ORDER BY id"
)
_SUMMARIES = (
    f"SELECT DISTINCT ON (conversation_id) conversation_id, {SUMMARY_COLUMNS} FROM summary"
    " WHERE conversation_id = ANY(?::bytea[]) ORDER BY conversation_id, through_seq DESC"
)


@final
class PostgresQueries(SqlQueries[psycopg.Connection]):
    """The shared queries over ``PostgresDialect``, reading a burst of
    snapshots together."""

    def conversation_snapshots(
        self, connection: psycopg.Connection, requests: list[tuple[str, int, int]]
    ) -> list[ConversationSnapshot]:
        """A page of history after ``after_seq``, the active notes and the latest
        summary, of each (conversation id, limit, after seq): three statements
        for the whole burst, in one read transaction (so one snapshot).

        Read one by one, each load was a transaction of its own, six round
        trips, each a psycopg call on the reader's thread: a burst of new
        conversations spent more CPU loading empty histories (in the node and
        in the server) than running their first turns. ``conversation_snapshot``,
        the plain reads, is what tests/storage/test_snapshots.py checks this
        against."""
        d = self.d
        ids = [d.text(conversation_id) for conversation_id, _, _ in requests]
        distinct = list(dict.fromkeys(ids))
        with d.snapshot(connection):
            rows = d.rows(
                connection,
                d.sql(_PAGES),
                (ids, [after for _, _, after in requests], [limit for _, limit, _ in requests]),
            )
            notes = d.rows(connection, d.sql(_NOTES), (distinct,))
            summaries = d.rows(connection, d.sql(_SUMMARIES), (distinct,))
            messages = self.messages_of(connection, [row[1:] for row in rows])
        by_request: list[list[Message]] = [[] for _ in requests]
        for row, message in zip(rows, messages, strict=True):
            by_request[row[0] - 1].append(message)
        memory: dict[str, list[MemoryEntry]] = {}
        for row in notes:
            entry = self._entry(MemoryEntry, row)
            memory.setdefault(entry.conversation_id, []).append(entry)
        latest: dict[str, Summary] = {
            d.text_of(row[0]): self._summary(row[1:]) for row in summaries
        }
        return [
            ConversationSnapshot(
                tuple(by_request[index]),
                tuple(memory.get(conversation_id, ())),
                latest.get(conversation_id),
            )
            for index, (conversation_id, _, _) in enumerate(requests)
        ]


QUERIES = PostgresQueries(PostgresDialect())
"""Every query PostgreSQL's stores run (``_sql_stores``)."""
